# Run 247 (H200, main with the final d128 defaults: the ring read ahead, no stagger): natively the d128 backward
# tests; then issue 12's command on the long-context cell and the d128 cells, as run 211.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
T0=$SECONDS
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; python3 -c "import jax, tokamax; print('jax', jax.__version__, 'tokamax', getattr(tokamax, '__version__', '?'))"; } > $OUT/run247_device.txt 2>&1; cat $OUT/run247_device.txt
timeout 170 python3 -m pytest -q -p no:cacheprovider -n 6 -k "(test_backward and d128) or ahead" tests/test_mosaic.py > $OUT/run247_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -1 $OUT/run247_pytest.log
timeout 150 python3 -m benchmarks.run --dtype bf16 --workloads long --impls ours-mosaic cudnn tokamax-mosaic --reps 15 --no-plots --out $OUT/run247_long > $OUT/run247_long.log 2>&1
echo "long rc $? $((SECONDS-T0)) s"
timeout $((585-(SECONDS-T0))) python3 -m benchmarks.run --dtype bf16 --workloads convention --match "d128 S4k " "d128 S16k " --impls ours-mosaic cudnn tokamax-mosaic --reps 15 --no-plots --time-budget $((545-(SECONDS-T0))) --out $OUT/run247_conv > $OUT/run247_conv.log 2>&1
echo "conv rc $? $((SECONDS-T0)) s"
for X in long conv; do sed -n '/^Per-rep paired/,/^$/p' $OUT/run247_$X.log | cut -c1-200; done
