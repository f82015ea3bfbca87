# Run 207 (H200): main after the d64 deterministic=False entry took causal too: its native tests (d64 causal
# soft-cap GQA, S2k d64 causal lengths, the d128 cases again) and the config table; then bwd_bench.py's new
# explicit compile path with its Mosaic kernel count on one cell (ours, its deterministic=False variant, cuDNN).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run207_device.txt 2>&1
cat $OUT/run207_device.txt
T="tests/test_mosaic.py::test_backward"
timeout 300 python3 -m pytest -q -p no:cacheprovider -n 6 -m "slow or not slow" \
  "$T[bwd deterministic=False d128 gqa kv lengths]" "$T[bwd deterministic=False d64 gqa causal softcap]" \
  "${T}_large[bwd deterministic=False S2k d128 gqa ragged]" "${T}_large[bwd deterministic=False S2k d64 causal lengths]" \
  tests/test_mosaic.py::test_backward_config_default_not_deterministic \
  "tests/test_attention.py::test_bad_input_raises_value_error" > $OUT/run207_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -3 $OUT/run207_pytest.log
timeout $((560-(SECONDS-T0))) python3 benchmarks/bwd_bench.py --cells d64-4k-C --variant deterministic=False \
  --only "ours,ours[deterministic=False],cudnn" --reps 5 > $OUT/run207.log 2>&1
echo "bench rc $? $((SECONDS-T0)) s"; grep -E "^  |^\|" $OUT/run207.log | cut -c1-170
