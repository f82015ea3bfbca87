# Run 199 (H200): one_launch (the dK/dV and dQ kernels' CTAs in one grid, the dQ CTAs filling the dK/dV kernel's
# last wave) natively: its tests; then against the d128 default of the same process (cfg_ab.py), all four cells.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
AB=benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run199_device.txt 2>&1
T="tests/test_mosaic.py::test_backward"
timeout 170 python3 -m pytest -q -p no:cacheprovider -n 5 -m "slow or not slow" \
  "${T}[bwd one launch d128 gqa causal lengths]" "${T}[bwd one launch dropout segments]" \
  "${T}_large[bwd one launch S2k d128 gqa (default otherwise)]" "${T}_large[bwd one launch causal ragged d128 window]" \
  "${T}_large[bwd one launch d256 split dropout]" > $OUT/run199_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -3 $OUT/run199_pytest.log
timeout $((575-(SECONDS-T0))) python3 $AB d128-4k-N,d128-16k-N,d128-4k-C,d128-16k-C one_launch=True > $OUT/run199.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"; grep -E "^d|^  " $OUT/run199.log
