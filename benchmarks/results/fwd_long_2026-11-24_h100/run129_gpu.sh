# Run 129 (H100): the causal d128 forward without dropout at S128k (B1, 16 heads) on three consumers, not
# persistent, no softmax overlap (the non-causal rule from S16k, and the dropout rule from S32k) against the
# default (two consumers, persistent, overlap); fwd and fwd+bwd, cuDNN in the same process.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run129_device.txt 2>&1
V="fwd.consumers=3,fwd.persistent=False,fwd.overlap_softmax=False"
timeout 540 python3 benchmarks/bwd_bench.py --cells d128-128k-C,d128-16k-C --variant $V --only "ours,ours[$V],cudnn" --out $OUT/run129 > $OUT/run129.log 2>&1
echo "rc $? $((SECONDS-T0)) s"; grep -vE "^\s*$" $OUT/run129.log | tail -25 | cut -c1-150
