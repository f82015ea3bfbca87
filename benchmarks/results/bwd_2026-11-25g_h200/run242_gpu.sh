# Run 242 (branch h-ring-ahead): natively the ring-ahead interpret cases; ptxas of the d128 dK/dV kernel with
# the rows through a 3-slot ring read a step ahead (row_ring=True on the default's prefetch_rows); A/B against
# the default on the four d128 cells.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/device.txt 2>&1
timeout 150 python3 -m pytest -q -p no:cacheprovider -n 2 -k "ahead or bad_backward_config" tests/test_mosaic.py > $OUT/pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -1 $OUT/pytest.log
timeout 120 python3 -m benchmarks.ptxas_report --head-dims 128 --seqlens 4096 --features plain --variant row_ring=True > $OUT/ptxas.log 2>&1
echo "ptxas rc $? $((SECONDS-T0)) s"; grep -i "dkdv\|spill" $OUT/ptxas.log | head -8
timeout $((580-(SECONDS-T0))) python3 benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py d128-16k-N,d128-4k-N,d128-16k-C,d128-4k-C \
  row_ring=True > $OUT/ab.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"
grep -v "^ *$" $OUT/ab.log | tail -12
