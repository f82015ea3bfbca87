# Run 123, H200: issue 12's done-when command (python -m benchmarks.run, peers in the same run) on main after the
# per-row span masks of the backward and the d64 forward (runs 119-122).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
T0=$SECONDS
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; python3 -c "import jax, tokamax; print('jax', jax.__version__, 'tokamax', tokamax.__version__ if hasattr(tokamax, '__version__') else '?')"; } > $OUT/device.txt 2>&1; cat $OUT/device.txt
timeout 150 python3 -m benchmarks.run --dtype bf16 --workloads long --impls ours-mosaic cudnn tokamax-mosaic --reps 5 --no-plots --out $OUT/long > $OUT/long.log 2>&1
echo "long rc $? $((SECONDS-T0)) s"
B=$((570-(SECONDS-T0)-40))
timeout $((570-(SECONDS-T0))) python3 -m benchmarks.run --dtype bf16 --workloads convention --match "d128 S4k " "d128 S16k " "d64 S4k " "d64 S16k " "d256 S1k " "d256 S4k " --impls ours-mosaic cudnn tokamax-mosaic --reps 5 --no-plots --time-budget $B --out $OUT/conv > $OUT/conv.log 2>&1
echo "conv rc $? $((SECONDS-T0)) s"
ls $OUT/long $OUT/conv 2>/dev/null | head; tail -30 $OUT/conv.log | cut -c1-220
