# Run 198 (H200): main with the d128 non-causal defaults with dropout and with ALiBi at 240 registers per dK/dV
# consumer (run 197). Natively, their tests.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run198_device.txt 2>&1
T="tests/test_mosaic.py::test_backward"
timeout 200 python3 -m pytest -q -p no:cacheprovider -n 4 -m "slow or not slow" \
  "${T}_large[bwd dropout dense mask d128]" "${T}_large[bwd alibi non-causal bottom_right gqa d128]" \
  "${T}[bwd alibi d128 non-causal default gqa lengths]" "${T}_large[bwd alibi non-causal lengths d64]" \
  > $OUT/run198_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -1 $OUT/run198_pytest.log
