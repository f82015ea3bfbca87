# Run 168 (H200): main with consumer 0 storing dS (and P) for consumer 1 only once its own GEMMs on them are issued
# (run 167's put_late=3, now unconditional), on top of run 165's dV first. 1) issue 12's command on the d256 cells
# (python -m benchmarks.run, cuDNN and tokamax in the same run, paired ratios); 2) the native d256 / split-head-dim
# backward tests of tests/test_mosaic.py (the five small ones; the slow ones ran in run 167 on run 165's kernels,
# whose gradients run 167 found bitwise equal to these). 3) Run on branch h-fused-put-late, whose flag
# fused_put_late (default 0: main's kernels) is A/B'd at d64 (the fused fixed-point kernel) with cfg_ab.py: consumer
# w stores its dS^T rows for the others' dQ GEMM after issuing its dK GEMM (1) or its dQ GEMM too (2).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
T0=$SECONDS
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; python3 -c "import jax, tokamax; print('jax', jax.__version__, 'tokamax', getattr(tokamax, '__version__', '?'))"; } > $OUT/run168_device.txt 2>&1; cat $OUT/run168_device.txt
timeout 240 python3 -m benchmarks.run --dtype bf16 --workloads convention --match "d256 S1k " "d256 S4k " --impls ours-mosaic cudnn tokamax-mosaic --reps 21 --no-plots --out $OUT/run168_conv > $OUT/run168_conv.log 2>&1
echo "conv rc $? $((SECONDS-T0)) s"
sed -n '/^Our kernels against/,/^$/p' $OUT/run168_conv.log | cut -c1-200; sed -n '/^Per-rep paired/,/^$/p' $OUT/run168_conv.log | cut -c1-200
timeout 200 python3 benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py d64-4k-N,d64-4k-C,d64-16k-N fused_put_late=1 fused_put_late=2 > $OUT/run168_ab.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"; grep -E "^d|^  " $OUT/run168_ab.log
T="tests/test_mosaic.py::test_backward"
timeout $((590-(SECONDS-T0))) python3 -m pytest -q -p no:cacheprovider -m "slow or not slow" \
  "$T[bwd d256 (split head dim) gqa causal ragged]" "$T[bwd d128 split head dim, segments, lengths]" \
  "$T[bwd alibi d256 (split head dim) lengths]" "$T[bwd dropout d256 (split head dim) causal ragged]" \
  "$T[bwd persistent split head dim d128 dropout]" \
  > $OUT/run168_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -3 $OUT/run168_pytest.log
