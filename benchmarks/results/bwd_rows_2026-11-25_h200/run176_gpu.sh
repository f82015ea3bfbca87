# Run 176 (H200): main with `row_ring` the d64 default (run 175). Natively, the row-ring tests and the d64 default
# backward tests; then issue 12's command on the d64 cells (python -m benchmarks.run, cuDNN and tokamax in the same
# run, paired ratios), as run 162.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
T0=$SECONDS
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; python3 -c "import jax, tokamax; print('jax', jax.__version__, 'tokamax', getattr(tokamax, '__version__', '?'))"; } > $OUT/run176_device.txt 2>&1; cat $OUT/run176_device.txt
T="tests/test_mosaic.py::test_backward"
K="test_backward and (d64 or dense or causal or segments or lengths or window or soft-cap or fp16) and not lowers and not d128 and not d256 and not 128 and not 160 and not dropout and not alibi and not split and not fused and not 3 and not stagger and not persistent"
timeout 200 python3 -m pytest -q -p no:cacheprovider -n 8 -m "slow or not slow" tests/test_mosaic.py -k "$K" > $OUT/run176_pytest.log 2>&1
echo "pytest (d64 defaults) rc $? $((SECONDS-T0)) s"; tail -1 $OUT/run176_pytest.log
timeout 150 python3 -m pytest -q -p no:cacheprovider -n 4 -m "slow or not slow" \
  "$T[bwd persistent fused row ring gqa causal lengths]" "$T[bwd dropout two kernels row ring gqa causal]" \
  "${T}_large[bwd persistent fused d64 causal]" tests/test_mosaic.py::test_backward_deterministic_and_zero_on_fully_masked_rows \
  >> $OUT/run176_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -3 $OUT/run176_pytest.log
timeout $((570-(SECONDS-T0))) python3 -m benchmarks.run --dtype bf16 --workloads convention --match "d64 S4k " "d64 S16k " --impls ours-mosaic cudnn tokamax-mosaic --reps 15 --no-plots --time-budget $((520-(SECONDS-T0))) --out $OUT/run176_conv > $OUT/run176_conv.log 2>&1
echo "conv rc $? $((SECONDS-T0)) s"
sed -n '/^Per-rep paired/,/^$/p' $OUT/run176_conv.log | cut -c1-200
