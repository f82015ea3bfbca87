# Run 145 (H100): issue 14's table at S16k with ALiBi's new backward default (bias_bench.py, as in run 144).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run145_device.txt 2>&1
timeout 400 python3 benchmarks/bias_bench.py --cells 16k-N,16k-C --reps 5 --sample-ms 30 --out $OUT/run145_s16k > $OUT/run145_s16k.log 2>&1
echo "run145 s16k rc $? $((SECONDS-T0)) s"
grep -v -i warning $OUT/run145_s16k.log | tail -22
