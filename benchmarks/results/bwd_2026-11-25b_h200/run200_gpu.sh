# Run 200 (H200): main at 6c08047 (the register split from one table, the two row rings allocated in one loop; the
# backward's jaxpr is unchanged) natively: d128 non-causal default (240 / 24), d64 fused persistent default (240 / 24
# through the fused rule), the dropout row ring with the lse2 / delta ring, three dQ consumers (160 / 32).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run200_device.txt 2>&1
T="tests/test_mosaic.py::test_backward"
timeout 200 python3 -m pytest -q -p no:cacheprovider -n 4 -m "slow or not slow" \
  "${T}_large[bwd ragged T1000 S1025 d128]" "${T}_large[bwd persistent fused d64 causal]" \
  "${T}[bwd dropout two kernels row ring gqa causal]" "${T}_large[bwd dq 3 consumers S2k causal d128 gqa]" \
  > $OUT/run200_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -1 $OUT/run200_pytest.log
