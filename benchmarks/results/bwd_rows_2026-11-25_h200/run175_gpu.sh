# Run 175 (H200): `row_ring=True` (MosaicBackwardConfig): the dK/dV kernel's producer copies each step's lse2 and
# delta rows by TMA into a ring beside Q / dO (run 88's row ring), against the default in one process (cfg_ab.py:
# each compiled twice, interleaved, gradients bitwise). d64 (fused, where the rows still load at the step's start:
# run 169's bound about 5% at S4k N), and d128 with the ring in place of prefetch_rows. First, run175_check.py.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
D=benchmarks/results/bwd_rows_2026-11-25_h200
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run175_device.txt 2>&1
timeout 120 python3 $D/run175_check.py > $OUT/run175_check.log 2>&1
echo "check rc $? $((SECONDS-T0)) s"; grep -v Warn $OUT/run175_check.log | tail -6
timeout 420 python3 benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py d64-4k-N,d64-4k-C,d64-16k-N,d64-16k-C,d128-4k-N,d128-16k-C row_ring=True,prefetch_rows=False > $OUT/run175.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"; grep -E "^d|^  " $OUT/run175.log
