# Run 154 (H100): dS^T from the kept Z P^T in the dK/dV kernel with dropout: the Mosaic dropout gradient tests
# natively, then the A/B over the four d128 cells.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
D=benchmarks/results/kept_ds_2026-11-24_h100
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,temperature.gpu --format=csv; } > $OUT/run154_device.txt 2>&1
timeout $((590-(SECONDS-T0))) python3 $D/kept_ab.py d128-16k-C,d128-16k-N,d128-4k-N,d128-4k-C > $OUT/run154_ab.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"
grep -E "^d" $OUT/run154_ab.log
timeout $((595-(SECONDS-T0))) python3 -m pytest -q -p no:cacheprovider -n 8 -m "slow or not slow" tests/test_mosaic.py -k "dropout and bwd" > $OUT/run154_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -2 $OUT/run154_pytest.log
