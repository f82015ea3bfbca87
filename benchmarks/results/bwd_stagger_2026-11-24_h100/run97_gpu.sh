# Run 97 (H100): confirmation of run 96's staggered consumers (2 stages) at d128, without and with dropout 0.1,
# against the default in the same process, one process per pair of cells.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run97_device.txt 2>&1
V="stagger_consumers=True"
for cells in d128-16k-N,d128-16k-C d128-4k-N,d128-4k-C; do
  timeout 140 python3 benchmarks/bwd_bench.py --cells $cells --variant $V --only "ours,cudnn,ours[$V]" --out $OUT/run97_${cells//,/_} > $OUT/run97_${cells//,/_}.log 2>&1
  echo "$cells rc $? $((SECONDS-T0)) s"
  timeout 140 python3 benchmarks/bwd_bench.py --cells $cells --dropout 0.1 --variant $V --only "ours,ours dropout,ours[$V]" --out $OUT/run97_dropout_${cells//,/_} > $OUT/run97_dropout_${cells//,/_}.log 2>&1
  echo "dropout $cells rc $? $((SECONDS-T0)) s"
done
grep -hE "^d|ours|cudnn " $OUT/run97_*.log | grep -v -i warn | cut -c1-118
