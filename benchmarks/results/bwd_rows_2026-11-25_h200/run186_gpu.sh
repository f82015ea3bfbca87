# Run 186 (H200): main with the d128 default on 128-key dQ steps, Q from shared memory (runs 184-185). Natively, the d128 default's
# tests; then issue 12's command on the d128 cells and the long-context cell (python -m benchmarks.run, cuDNN and
# tokamax in the same run, paired ratios), as runs 171 and 183.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
T0=$SECONDS
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; python3 -c "import jax, tokamax; print('jax', jax.__version__, 'tokamax', getattr(tokamax, '__version__', '?'))"; } > $OUT/run186_device.txt 2>&1; cat $OUT/run186_device.txt
T="tests/test_mosaic.py::test_backward"
timeout 100 python3 -m pytest -q -p no:cacheprovider -n 3 -m "slow or not slow" "$T[bwd d128 default (rows prefetched) gqa causal ragged]" \
  "${T}_large[bwd S2k causal d128]" "${T}_large[bwd ragged T1000 S1025 d128]" > $OUT/run186_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -1 $OUT/run186_pytest.log
timeout 150 python3 -m benchmarks.run --dtype bf16 --workloads long --impls ours-mosaic cudnn tokamax-mosaic --reps 15 --no-plots --out $OUT/run186_long > $OUT/run186_long.log 2>&1
echo "long rc $? $((SECONDS-T0)) s"
timeout $((440-(SECONDS-T0))) python3 -m benchmarks.run --dtype bf16 --workloads convention --match "d128 S4k " "d128 S16k " --impls ours-mosaic cudnn tokamax-mosaic --reps 15 --no-plots --time-budget $((400-(SECONDS-T0))) --out $OUT/run186_conv > $OUT/run186_conv.log 2>&1
echo "conv rc $? $((SECONDS-T0)) s"
for D in long conv; do sed -n '/^Per-rep paired/,/^$/p' $OUT/run186_$D.log | cut -c1-200; done
