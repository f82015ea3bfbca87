# Run 103 (H100): issue 14's table (bias_bench.py, every row) at S16k N and C on main with the d128 no-dropout
# backward's staggered consumers; the S4k cells were not rerun (device time).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; python3 -c "import jax, torch; print('jax', jax.__version__, 'torch', torch.__version__)"; } > $OUT/run103_device.txt 2>&1; cat $OUT/run103_device.txt
timeout 400 python3 benchmarks/bias_bench.py --cells 16k-N,16k-C --reps 5 --sample-ms 30 --out $OUT/run103_s16k > $OUT/run103_s16k.log 2>&1
echo "run103 s16k rc $? $((SECONDS-T0)) s"
grep -v -i warning $OUT/run103_s16k.log | tail -22
