# Run 151 (H100): lazy rescaling in the Mosaic forward: the forward tests natively, then the A/B at S16k.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
D=benchmarks/results/lazy_rescale_2026-11-24_h100
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,temperature.gpu --format=csv; } > $OUT/run151_device.txt 2>&1
timeout 240 python3 -m pytest -q -n 8 tests/test_mosaic.py -k "not bwd and not backward and not gradients and not lowers" -m "slow or not slow" > $OUT/run151_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -3 $OUT/run151_pytest.log
timeout $((590-(SECONDS-T0))) python3 $D/rescale_ab.py d128-16k-C,d128-16k-N plain,dropout > $OUT/run151_ab.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"
grep -E "^d|^  " $OUT/run151_ab.log
