# Run 147 (H100): issue 14's table with 21 reps per cell and per-rep paired ratios (bias_bench since this run).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run147_device.txt 2>&1
timeout 280 python3 benchmarks/bias_bench.py --cells 16k-N,16k-C --reps 21 --sample-ms 30 --out $OUT/run147_s16k > $OUT/run147_s16k.log 2>&1
echo "run147 s16k rc $? $((SECONDS-T0)) s"
timeout $((590-(SECONDS-T0))) python3 benchmarks/bias_bench.py --cells 4k-N,4k-C --reps 21 --sample-ms 30 --out $OUT/run147_s4k > $OUT/run147_s4k.log 2>&1
echo "run147 s4k rc $? $((SECONDS-T0)) s"
for f in run147_s4k run147_s16k; do grep -A20 "^fwd+bwd time ratios" $OUT/$f.log; done
