# Run 101, H100: issue 12's done-when command (python -m benchmarks.run, peers in the same run) on main with the d128
# default's staggered consumers: the long-context cell, then the d128 convention cells; then the d128 backward tests.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
T0=$SECONDS
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; python3 -c "import jax, tokamax; print('jax', jax.__version__, 'tokamax', tokamax.__version__ if hasattr(tokamax, '__version__') else '?')"; } > $OUT/device.txt 2>&1; cat $OUT/device.txt
timeout 150 python3 -m benchmarks.run --dtype bf16 --workloads long --impls ours-mosaic cudnn tokamax-mosaic --reps 5 --no-plots --out $OUT/long > $OUT/long.log 2>&1
echo "long rc $? $((SECONDS-T0)) s"
timeout 240 python3 -m benchmarks.run --dtype bf16 --workloads convention --match "d128 S4k " "d128 S16k " --impls ours-mosaic cudnn tokamax-mosaic --reps 5 --no-plots --time-budget 200 --out $OUT/conv > $OUT/conv.log 2>&1
echo "conv rc $? $((SECONDS-T0)) s"
timeout -s INT $((580-(SECONDS-T0))) python3 -m pytest -v -p no:benchmark -p no:cacheprovider -m "slow or not slow" -n 8 tests/test_mosaic.py::test_backward_large tests/test_mosaic.py::test_backward_deterministic_and_zero_on_fully_masked_rows -k "d128 or deterministic" > $OUT/pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; grep -cE " PASSED" $OUT/pytest.log; grep -E " FAILED| ERROR" $OUT/pytest.log | cut -c1-200 | head; tail -1 $OUT/pytest.log
tail -12 $OUT/long.log | cut -c1-200; tail -16 $OUT/conv.log | cut -c1-220
