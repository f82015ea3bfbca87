# Run 187 (H200): main at 2b402c7 (forward.copy_row_pair: the producer's row-pair TMA copy shared by the dropout
# key ring and the dK/dV row ring) natively: the row-ring forms (d64 fused / persistent, d256 split, dropout dK/dV
# rows) and determinism. Then, against the d128 default of the same process (cfg_ab.py), the fused kernel with f32
# adds (deterministic=False): the five-unit kernel's ceiling on today's d128 code, before any deterministic form.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
AB=benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run187_device.txt 2>&1
cat $OUT/run187_device.txt
T="tests/test_mosaic.py::test_backward"
timeout 300 python3 -m pytest -q -p no:cacheprovider -n 6 -m "slow or not slow" \
  tests/test_mosaic.py::test_backward_deterministic_and_zero_on_fully_masked_rows \
  "$T[bwd fused row ring, not persistent, gqa causal lengths]" "$T[bwd dropout two kernels row ring gqa causal]" \
  "$T[bwd d256 (split head dim) gqa causal ragged]" "$T[bwd dropout d256 (split head dim) causal ragged]" \
  "${T}_large[bwd persistent fused d64 causal]" "${T}_large[bwd persistent fused d64 dropout]" \
  "${T}_large[bwd d256 S1k causal gqa]" "${T}_large[bwd dropout S2k causal d128 gqa]" \
  "${T}_large[bwd dropout S1k d64 default (two kernels, 64-row steps) causal]" "${T}_large[bwd S1k d64]" \
  "${T}_large[bwd dropout S1k d64 (fused fixed point) ragged lengths]" "${T}_large[bwd d256 ragged window soft-cap]" \
  > $OUT/run187_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -3 $OUT/run187_pytest.log
timeout $((570-(SECONDS-T0))) python3 $AB d128-4k-N,d128-16k-N fused=True,prefetch_rows=False,deterministic=False \
  fused=True,prefetch_rows=False,deterministic=False,row_ring=True > $OUT/run187.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"; grep -E "^d|^  " $OUT/run187.log
