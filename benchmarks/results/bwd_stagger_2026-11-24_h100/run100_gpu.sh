# Run 100 (H100): staggered consumers (two-kernel d128 backward) at the long-context cell (B1, 16 heads, S128k causal)
# and again at d128 S16k C / N, against the default in the same process.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run100_device.txt 2>&1
V="stagger_consumers=True"
for cells in d128-128k-C d128-16k-C,d128-16k-N; do
  timeout 150 python3 benchmarks/bwd_bench.py --cells $cells --variant $V --only "ours,cudnn,ours[$V]" --out $OUT/run100_${cells//,/_} > $OUT/run100_${cells//,/_}.log 2>&1
  echo "$cells rc $? $((SECONDS-T0)) s"
done
grep -hE "^d|ours|cudnn " $OUT/run100_*.log | grep -v -i warn | cut -c1-118
