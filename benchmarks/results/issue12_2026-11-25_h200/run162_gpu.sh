# Run 162, H200: issue 12's done-when command (python -m benchmarks.run, peers in the same run) on main at 1fb03ab,
# where every implementation of a cell is timed in one interleaved run and the report adds per-rep paired ratios.
# The no-feature kernels are those of run 123 (../issue12_2026-11-24d_h200/).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
T0=$SECONDS
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; python3 -c "import jax, tokamax; print('jax', jax.__version__, 'tokamax', getattr(tokamax, '__version__', '?'))"; } > $OUT/device.txt 2>&1; cat $OUT/device.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,temperature.gpu,power.draw,clocks_event_reasons.active --format=csv -l 1 > $OUT/clocks.csv 2>&1 &
SMI=$!
timeout 150 python3 -m benchmarks.run --dtype bf16 --workloads long --impls ours-mosaic cudnn tokamax-mosaic --reps 15 --no-plots --out $OUT/long > $OUT/long.log 2>&1
echo "long rc $? $((SECONDS-T0)) s"
B=$((555-(SECONDS-T0)-45))
timeout $((555-(SECONDS-T0))) python3 -m benchmarks.run --dtype bf16 --workloads convention --match "d128 S4k " "d128 S16k " "d64 S4k " "d64 S16k " "d256 S1k " "d256 S4k " --impls ours-mosaic cudnn tokamax-mosaic --reps 15 --no-plots --time-budget $B --out $OUT/conv > $OUT/conv.log 2>&1
echo "conv rc $? $((SECONDS-T0)) s"
kill $SMI
awk -F', ' 'NR>1 {n++; c+=$2; if ($2<m||m=="") m=$2; if ($3>t) t=$3} END {print "sm clock mean", c/n, "min", m, "max temp", t}' $OUT/clocks.csv
for D in long conv; do sed -n '/^Our kernels against/,/^$/p' $OUT/$D.log | cut -c1-200; sed -n '/^Per-rep paired/,/^$/p' $OUT/$D.log | cut -c1-200; done
