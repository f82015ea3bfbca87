# Run 172 (H200): main's backward tests natively (tests/test_mosaic.py, slow ones included) on the kernels this
# session changed: the d128 two-kernel default (prefetch_rows) and the checks of the config.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run172_device.txt 2>&1
timeout 560 python3 -m pytest -q -p no:cacheprovider -m "slow or not slow" tests/test_mosaic.py -k "(test_backward or test_bad_backward) and not lowers and not 256 and not split and not fused and not head_dim_40" > $OUT/run172_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -5 $OUT/run172_pytest.log
