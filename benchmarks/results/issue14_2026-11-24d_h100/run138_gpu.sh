# Run 138 (H100): the dropout tests natively with d128's new dropout backward default (128-key dQ steps; from
# T, S >= 16k where causal, staggered consumers), then issue 14's table (bias_bench.py, as in run 134).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; python3 -c "import jax, torch; print('jax', jax.__version__, 'torch', torch.__version__)"; } > $OUT/run138_device.txt 2>&1; cat $OUT/run138_device.txt
timeout 130 python3 -m pytest -q -p no:cacheprovider -n 8 -m "slow or not slow" tests/test_mosaic.py -k "dropout and not lowers" > $OUT/run138_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -2 $OUT/run138_pytest.log
timeout 230 python3 benchmarks/bias_bench.py --cells 16k-N,16k-C --reps 5 --sample-ms 30 --out $OUT/run138_s16k > $OUT/run138_s16k.log 2>&1
echo "run138 s16k rc $? $((SECONDS-T0)) s"
timeout $((585-(SECONDS-T0))) python3 benchmarks/bias_bench.py --cells 4k-N,4k-C --reps 5 --sample-ms 30 --out $OUT/run138_s4k > $OUT/run138_s4k.log 2>&1
echo "run138 s4k rc $? $((SECONDS-T0)) s"
for f in run138_s4k run138_s16k; do grep -v -i warning $OUT/$f.log | tail -22; done
