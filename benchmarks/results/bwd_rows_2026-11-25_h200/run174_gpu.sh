# Run 174 (H200): main at a5d9bab (the dK/dV kernel's row loads tidied: load_rows(head, tile), the prefetch's
# clamp in load_rows_ahead only) had not run natively. The d128 default backward (rows prefetched), the d128 forms
# without the prefetch (dropout, ALiBi), the padded head dim 80, and the determinism test.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run174_device.txt 2>&1
N=""; python3 -c "import xdist" 2>/dev/null && N="-n 6"
echo "xdist: ${N:-none}"
T="tests/test_mosaic.py::test_backward_large"
timeout 540 python3 -m pytest -q -p no:cacheprovider $N -m "slow or not slow" \
  tests/test_mosaic.py::test_backward_deterministic_and_zero_on_fully_masked_rows \
  "tests/test_mosaic.py::test_backward[bwd d128 default (rows prefetched) gqa causal ragged]" \
  "$T[bwd S2k causal d128]" "$T[bwd ragged T1000 S1025 d128]" "$T[bwd gqa 32/8 causal]" \
  "$T[bwd lengths bottom_right]" "$T[bwd fp16 softcap S1k d128]" "$T[bwd segments S2k]" "$T[bwd window S2k]" \
  "$T[bwd dense mask S1k]" "$T[bwd head dim 80 (padded)]" "$T[bwd alibi S1k causal gqa d128]" \
  "$T[bwd dropout S2k causal d128 gqa]" "$T[bwd persistent d128 causal gqa ragged]" \
  > $OUT/run174_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -5 $OUT/run174_pytest.log
