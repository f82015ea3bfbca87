# Run 231 (H200): scores_ahead with lse2 from the ring and delta prefetched (row_ring + prefetch_rows): natively the
# scores_ahead tests; ptxas of the d128 S4k kernels; A/B against the default (and without the stagger) on the d128 cells.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run231_device.txt 2>&1
timeout 150 python3 -m pytest -q -p no:cacheprovider -n 4 -k "scores and ahead" tests/test_mosaic.py > $OUT/run231_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -2 $OUT/run231_pytest.log
timeout 200 python3 -m benchmarks.ptxas_report --head-dims 128 --seqlens 4096 --features plain \
  --variant row_ring=True,scores_ahead=True --variant row_ring=True,scores_ahead=True,stagger_consumers=False --out $OUT/run231_ptxas.md > $OUT/run231_ptxas.log 2>&1
echo "ptxas rc $? $((SECONDS-T0)) s"; grep -i "dkdv" $OUT/run231_ptxas.md
timeout $((575-(SECONDS-T0))) python3 benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py d128-4k-N,d128-16k-N,d128-16k-C,d128-4k-C \
  row_ring=True,scores_ahead=True row_ring=True,scores_ahead=True,stagger_consumers=False > $OUT/run231_ab.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"
grep -v "^ *$" $OUT/run231_ab.log | tail -16
