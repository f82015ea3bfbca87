# Run 215 (H200): main with the d128 opt-in unstaggered (run 214). Natively its tests; then issue 12's command on
# the d128 non-causal cells with the opt-in beside the default (paired ratios), as run 213.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
T0=$SECONDS
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; python3 -c "import jax, tokamax; print('jax', jax.__version__, 'tokamax', getattr(tokamax, '__version__', '?'))"; } > $OUT/run215_device.txt 2>&1; cat $OUT/run215_device.txt
T="tests/test_mosaic.py::test_backward"
timeout 150 python3 -m pytest -q -p no:cacheprovider -n 3 -m "slow or not slow" "$T[bwd deterministic=False d128 gqa kv lengths]" \
  "${T}_large[bwd deterministic=False S2k d128 gqa ragged]" tests/test_mosaic.py::test_backward_config_default_not_deterministic > $OUT/run215_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -1 $OUT/run215_pytest.log
timeout $((585-(SECONDS-T0))) python3 -m benchmarks.run --dtype bf16 --workloads convention --match "d128 S4k N" "d128 S16k N" --impls ours-mosaic ours-mosaic-nondet cudnn tokamax-mosaic --reps 21 --no-plots --time-budget $((545-(SECONDS-T0))) --out $OUT/run215_conv > $OUT/run215_conv.log 2>&1
echo "conv rc $? $((SECONDS-T0)) s"
sed -n '/^Per-rep paired/,/^$/p' $OUT/run215_conv.log | cut -c1-200
