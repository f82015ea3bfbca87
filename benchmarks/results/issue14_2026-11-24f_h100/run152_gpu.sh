# Run 152 (H100): run 148 again (a second process on the same code), with the GPU's clock, temperature, power and throttle
# reasons logged once a second (run 147's machine was thermally throttled: see README.md).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
R=${RUN:-run152}
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,temperature.gpu --format=csv
  nvidia-smi -q -d PERFORMANCE | grep -A6 "Event Reasons Counters"; } > $OUT/${R}_device.txt 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,temperature.gpu,power.draw,clocks_event_reasons.active --format=csv -l 1 > $OUT/${R}_clocks.csv 2>&1 &
SMI=$!
for cells in ${CELLS:-16k-N,16k-C 4k-N,4k-C}; do
  tag=s${cells%%-*}
  timeout $((590-(SECONDS-T0))) python3 benchmarks/bias_bench.py --cells $cells --reps 21 --sample-ms 30 --out $OUT/${R}_$tag > $OUT/${R}_$tag.log 2>&1
  echo "$R $tag rc $? $((SECONDS-T0)) s"
done
kill $SMI
nvidia-smi -q -d PERFORMANCE | grep -A6 "Event Reasons Counters" >> $OUT/${R}_device.txt
cat $OUT/${R}_device.txt
awk -F', ' 'NR>1 {n++; c+=$2; if ($2<m||m=="") m=$2; if ($3>t) t=$3} END {print "sm clock mean", c/n, "min", m, "max temp", t}' $OUT/${R}_clocks.csv
for f in $OUT/${R}_s*.log; do grep -A20 "^fwd+bwd time ratios" $f; done
# then the dropout forward on three consumers at S16k C (the rule takes them from 32k), the backward's A/B tool
timeout $((595-(SECONDS-T0))) python3 benchmarks/results/dropout_bwd_2026-11-24_h100/drop_ab.py d128-16k-C fwd:consumers=3,persistent=False > $OUT/${R}_fwd3.log 2>&1
echo "$R fwd3 rc $? $((SECONDS-T0)) s"
grep -E "^d|^  " $OUT/${R}_fwd3.log
