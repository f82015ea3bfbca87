# Run 156 (H100): issue 14's S16k cells after dS^T from the kept Z P^T (runs 154-155) and the three-consumer causal
# dropout forward from 16k (run 153): paired ratios (bias_bench, 21 reps), clocks logged.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
R=run156
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,temperature.gpu --format=csv; } > $OUT/${R}_device.txt 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,temperature.gpu,power.draw,clocks_event_reasons.active --format=csv -l 1 > $OUT/${R}_clocks.csv 2>&1 &
SMI=$!
timeout $((590-(SECONDS-T0))) python3 benchmarks/bias_bench.py --cells 16k-N,16k-C --reps 21 --sample-ms 30 --out $OUT/${R}_s16k > $OUT/${R}_s16k.log 2>&1
echo "$R s16k rc $? $((SECONDS-T0)) s"
kill $SMI
awk -F', ' 'NR>1 {n++; c+=$2; if ($2<m||m=="") m=$2; if ($3>t) t=$3} END {print "sm clock mean", c/n, "min", m, "max temp", t}' $OUT/${R}_clocks.csv
grep -E "mosaic" $OUT/${R}_s16k.log | head -8
grep -A20 "^fwd+bwd time ratios" $OUT/${R}_s16k.log
