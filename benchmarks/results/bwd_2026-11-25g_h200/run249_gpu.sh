# Run 249 (H200, branch h-scores-ring-ahead): natively the two scores_ahead cases; A/B of scores_ahead=True (the next
# step's S^T issued behind dK, its lse2 from the ring read ahead) against the default on three d128 cells.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run249_device.txt 2>&1
timeout 90 python3 -m pytest -q -p no:cacheprovider -n 2 -k "scores and ahead and test_backward" tests/test_mosaic.py > $OUT/run249_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -1 $OUT/run249_pytest.log
timeout $((300-(SECONDS-T0))) python3 benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py d128-16k-N,d128-4k-N,d128-16k-C \
  scores_ahead=True > $OUT/run249_ab.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"
grep -v "^ *$" $OUT/run249_ab.log | grep -v Warning | tail -9
