# Run 160 (H100): issue 14's table on the code without staggered consumers in the d128 dropout backward (c52812e):
# S16k twice in separate processes, then S4k, paired ratios (bias_bench, 21 reps), clocks logged.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
R=run160
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,temperature.gpu --format=csv; } > $OUT/${R}_device.txt 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,temperature.gpu,power.draw,clocks_event_reasons.active --format=csv -l 1 > $OUT/${R}_clocks.csv 2>&1 &
SMI=$!
for P in s16k_a:16k-N,16k-C s16k_b:16k-N,16k-C s4k:4k-N,4k-C; do
  N=${P%%:*}; C=${P#*:}
  timeout $((590-(SECONDS-T0))) python3 benchmarks/bias_bench.py --cells $C --reps 21 --sample-ms 30 --out $OUT/${R}_$N > $OUT/${R}_$N.log 2>&1
  echo "$R $N rc $? $((SECONDS-T0)) s"
done
kill $SMI
awk -F', ' 'NR>1 {n++; c+=$2; if ($2<m||m=="") m=$2; if ($3>t) t=$3} END {print "sm clock mean", c/n, "min", m, "max temp", t}' $OUT/${R}_clocks.csv
for N in s16k_a s16k_b s4k; do grep -E "^mosaic" $OUT/${R}_$N.log | head -3; grep -A10 "^fwd+bwd per-rep" $OUT/${R}_$N.log | grep -E "cudnn / triton \(|mosaic"; done
