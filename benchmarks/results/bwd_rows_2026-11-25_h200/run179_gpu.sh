# Run 179 (H200): main with the d64 default persistent (runs 177-178) and the d256 default's row ring (run 177).
# Natively, the d64 / d256 / split backward tests; then issue 12's command on the d64 and d256 cells
# (python -m benchmarks.run, cuDNN and tokamax in the same run, paired ratios), as runs 162 and 176.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
T0=$SECONDS
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; python3 -c "import jax, tokamax; print('jax', jax.__version__, 'tokamax', getattr(tokamax, '__version__', '?'))"; } > $OUT/run179_device.txt 2>&1; cat $OUT/run179_device.txt
K="(test_backward and (d64 or 256 or split or ring or dense or causal or segments or lengths or window or soft-cap or fp16) and not lowers and not d128 and not 128 and not alibi and not dropout and not 3 and not stagger) or deterministic_and_zero"
timeout 230 python3 -m pytest -q -p no:cacheprovider -n 8 -m "slow or not slow" tests/test_mosaic.py -k "$K" > $OUT/run179_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -2 $OUT/run179_pytest.log
timeout $((585-(SECONDS-T0))) python3 -m benchmarks.run --dtype bf16 --workloads convention --match "d64 S4k " "d64 S16k " "d256 S1k " "d256 S4k " --impls ours-mosaic cudnn tokamax-mosaic --reps 15 --no-plots --time-budget $((540-(SECONDS-T0))) --out $OUT/run179_conv > $OUT/run179_conv.log 2>&1
echo "conv rc $? $((SECONDS-T0)) s"
sed -n '/^Per-rep paired/,/^$/p' $OUT/run179_conv.log | cut -c1-200
