# Run 191 (H200): main with the d128 non-causal default at 240 registers per dK/dV consumer (runs 189-190).
# Natively, the tests of that default and of the registers' fields; then issue 12's command on the d128 cells
# (python -m benchmarks.run, cuDNN and tokamax in the same run, paired ratios), as run 186.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
T0=$SECONDS
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; python3 -c "import jax, tokamax; print('jax', jax.__version__, 'tokamax', getattr(tokamax, '__version__', '?'))"; } > $OUT/run191_device.txt 2>&1; cat $OUT/run191_device.txt
T="tests/test_mosaic.py::test_backward"
timeout 170 python3 -m pytest -q -p no:cacheprovider -n 6 -m "slow or not slow" \
  "${T}_large[bwd ragged T1000 S1025 d128]" "${T}_large[bwd fp16 softcap S1k d128]" \
  "${T}_large[bwd head dim 80 (padded)]" "${T}_large[bwd registers 240 both kernels gqa lengths d128]" \
  "${T}_large[bwd dense mask S1k]" "${T}[bwd fused f32 d128 segments]" > $OUT/run191_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -1 $OUT/run191_pytest.log
timeout $((560-(SECONDS-T0))) python3 -m benchmarks.run --dtype bf16 --workloads convention --match "d128 S4k " "d128 S16k " --impls ours-mosaic cudnn tokamax-mosaic --reps 15 --no-plots --time-budget $((520-(SECONDS-T0))) --out $OUT/run191_conv > $OUT/run191_conv.log 2>&1
echo "conv rc $? $((SECONDS-T0)) s"
sed -n '/^Per-rep paired/,/^$/p' $OUT/run191_conv.log | cut -c1-200
