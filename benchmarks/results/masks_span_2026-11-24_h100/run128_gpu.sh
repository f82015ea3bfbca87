# Run 128 (H100): after masks._span (kv_bounds / q_bounds / visible_span from one span rule; the Mosaic kernel
# modules are textually unchanged, the Pallas-Triton and decode kernels call kv_bounds / q_bounds in the kernel):
# the Triton attention, decode and bias / dropout tests natively, slow ones included, 8 workers.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run128_device.txt 2>&1
timeout -s INT 540 python3 -m pytest -v -rfE -p no:cacheprovider -m "slow or not slow" -n 8 tests/test_attention.py tests/test_decode.py tests/test_bias_dropout.py > $OUT/run128_pytest.log 2>&1
echo "rc $? $((SECONDS-T0)) s"; grep -c PASSED $OUT/run128_pytest.log; grep -E "FAILED|ERROR " $OUT/run128_pytest.log | head -5; grep -E "passed|failed" $OUT/run128_pytest.log | tail -1
