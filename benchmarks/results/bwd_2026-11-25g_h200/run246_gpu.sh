# Run 246 (H200, main with the d128 default unstaggered): natively the d128 backward tests; the soft-cap cell with
# the stagger against the new default (feat_ab.py); issue 12's command on the d128 non-causal cells with the opt-in
# deterministic=False beside the default (paired ratios), as run 213.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
T0=$SECONDS
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; python3 -c "import jax, tokamax; print('jax', jax.__version__, 'tokamax', getattr(tokamax, '__version__', '?'))"; } > $OUT/run246_device.txt 2>&1; cat $OUT/run246_device.txt
timeout 170 python3 -m pytest -q -p no:cacheprovider -n 6 -k "(test_backward and d128) or ahead" tests/test_mosaic.py > $OUT/run246_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -1 $OUT/run246_pytest.log
timeout 80 python3 benchmarks/results/bwd_2026-11-25g_h200/feat_ab.py d128-4k-N+cap stagger_consumers=True > $OUT/run246_cap.log 2>&1; echo "cap rc $? $((SECONDS-T0)) s"
timeout $((585-(SECONDS-T0))) python3 -m benchmarks.run --dtype bf16 --workloads convention --match "d128 S4k N" "d128 S16k N" --impls ours-mosaic ours-mosaic-nondet cudnn tokamax-mosaic --reps 15 --no-plots --time-budget $((545-(SECONDS-T0))) --out $OUT/run246_conv > $OUT/run246_conv.log 2>&1
echo "conv rc $? $((SECONDS-T0)) s"
grep -v "^ *$" $OUT/run246_cap.log | grep -v Warning | tail -3
sed -n '/^Per-rep paired/,/^$/p' $OUT/run246_conv.log | cut -c1-220
