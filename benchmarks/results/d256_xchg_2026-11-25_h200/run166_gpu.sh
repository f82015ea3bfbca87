# Run 166 (H200): main with consumer 0's dV GEMM issued before dS^T in the d256 dK/dV kernel (run 165's
# split_dv_first=1, now unconditional). 1) the native d256 / split-head-dim backward tests of tests/test_mosaic.py,
# slow ones included; 2) issue 12's command on the d256 cells (python -m benchmarks.run, cuDNN and tokamax in the
# same run, paired ratios).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
T0=$SECONDS
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; python3 -c "import jax, tokamax; print('jax', jax.__version__, 'tokamax', getattr(tokamax, '__version__', '?'))"; } > $OUT/run166_device.txt 2>&1; cat $OUT/run166_device.txt
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_mosaic.py -m "slow or not slow" -k "backward and (256 or split or 160)" > $OUT/run166_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -3 $OUT/run166_pytest.log
timeout $((560-(SECONDS-T0))) python3 -m benchmarks.run --dtype bf16 --workloads convention --match "d256 S1k " "d256 S4k " --impls ours-mosaic cudnn tokamax-mosaic --reps 21 --no-plots --out $OUT/run166_conv > $OUT/run166_conv.log 2>&1
echo "conv rc $? $((SECONDS-T0)) s"
sed -n '/^Our kernels against/,/^$/p' $OUT/run166_conv.log | cut -c1-200; sed -n '/^Per-rep paired/,/^$/p' $OUT/run166_conv.log | cut -c1-200
