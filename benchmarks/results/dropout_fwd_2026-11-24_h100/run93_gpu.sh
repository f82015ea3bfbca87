# Run 93 (H100): the d128 forward's config with dropout 0.1, against ours without dropout and ours with dropout
# (default configs), one process per cell: three consumers not persistent, 64-key tiles with and without the
# softmax overlap, and the causal kernel not persistent.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run93_device.txt 2>&1
V1="fwd.consumers=3,persistent=False"; V2="block_kv=64,overlap_softmax=True"; V3="block_kv=64"; V4="persistent=False"
for cells in d128-4k-N,d128-4k-C d128-16k-N,d128-16k-C; do
  timeout $((295-(SECONDS-T0)/2)) python3 benchmarks/bwd_bench.py --cells $cells --dropout 0.1 --variant $V1 --variant $V2 --variant $V3 --variant $V4 --only "ours,ours dropout,ours[$V1],ours[$V2],ours[$V3],ours[$V4]" --out $OUT/run93_${cells//,/_} > $OUT/run93_${cells//,/_}.log 2>&1
  echo "$cells rc $? $((SECONDS-T0)) s"
done
grep -hE "^d|ours" $OUT/run93_*.log | grep -v -i warn | cut -c1-118
