# Run 210 (H200): issue 12's command on today's main, d64 and d256 cells (python -m benchmarks.run, cuDNN and
# tokamax in the same run, paired ratios), as run 179; no kernel has changed since runs 179 / 191 / 186.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
T0=$SECONDS
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; python3 -c "import jax, tokamax; print('jax', jax.__version__, 'tokamax', getattr(tokamax, '__version__', '?'))"; } > $OUT/run210_device.txt 2>&1; cat $OUT/run210_device.txt
timeout $((585-(SECONDS-T0))) python3 -m benchmarks.run --dtype bf16 --workloads convention --match "d64 S4k " "d64 S16k " "d256 S1k " "d256 S4k " --impls ours-mosaic cudnn tokamax-mosaic --reps 15 --no-plots --time-budget $((545-(SECONDS-T0))) --out $OUT/run210_conv > $OUT/run210_conv.log 2>&1
echo "conv rc $? $((SECONDS-T0)) s"
sed -n '/^Per-rep paired/,/^$/p' $OUT/run210_conv.log | cut -c1-200
