# Run 213 (H200): issue 12's command with flash_attention(deterministic=False) beside the default (ours-mosaic-nondet),
# d64 and d128 cells, cuDNN and tokamax in the same run (paired ratios); the opt-in changes nothing at d256 or at d128
# causal, so those cells are not repeated.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
T0=$SECONDS
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
{ date -u; git log --oneline -1; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; python3 -c "import jax, tokamax; print('jax', jax.__version__, 'tokamax', getattr(tokamax, '__version__', '?'))"; } > $OUT/run213_device.txt 2>&1; cat $OUT/run213_device.txt
timeout $((585-(SECONDS-T0))) python3 -m benchmarks.run --dtype bf16 --workloads convention --match "d64 S4k " "d64 S16k " "d128 S4k N" "d128 S16k N" --impls ours-mosaic ours-mosaic-nondet cudnn tokamax-mosaic --reps 15 --no-plots --time-budget $((545-(SECONDS-T0))) --out $OUT/run213_conv > $OUT/run213_conv.log 2>&1
echo "conv rc $? $((SECONDS-T0)) s"
sed -n '/^Per-rep paired/,/^$/p' $OUT/run213_conv.log | cut -c1-200
