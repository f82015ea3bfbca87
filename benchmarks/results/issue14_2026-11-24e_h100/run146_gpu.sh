# Run 146 (H100): issue 14's table again on the same code as runs 144-145 (a second reading of every cell).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run146_device.txt 2>&1
timeout 200 python3 benchmarks/bias_bench.py --cells 16k-N,16k-C --reps 5 --sample-ms 30 --out $OUT/run146_s16k > $OUT/run146_s16k.log 2>&1
echo "run146 s16k rc $? $((SECONDS-T0)) s"
timeout $((590-(SECONDS-T0))) python3 benchmarks/bias_bench.py --cells 4k-N,4k-C --reps 5 --sample-ms 30 --out $OUT/run146_s4k > $OUT/run146_s4k.log 2>&1
echo "run146 s4k rc $? $((SECONDS-T0)) s"
for f in run146_s4k run146_s16k; do grep -A9 "^fwd+bwd time ratios" $OUT/$f.log; done
