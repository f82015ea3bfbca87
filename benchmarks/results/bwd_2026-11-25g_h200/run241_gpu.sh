# Not run yet (this session's device time was spent): branch h-mbar-release. Natively the two mbarrier_release
# tests; then A/B of mbarrier_release=True against the default on the d128 cells (runs 233-240 found the d128
# backward moving with what the producer does between its copies and its wait for a released slot).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/device.txt 2>&1
timeout 150 python3 -m pytest -q -p no:cacheprovider -n 2 -k "mbarrier and release" tests/test_mosaic.py > $OUT/pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -1 $OUT/pytest.log
timeout $((575-(SECONDS-T0))) python3 benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py d128-16k-N,d128-4k-N,d128-16k-C,d128-4k-C \
  mbarrier_release=True > $OUT/ab.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"
grep -v "^ *$" $OUT/ab.log | tail -12
