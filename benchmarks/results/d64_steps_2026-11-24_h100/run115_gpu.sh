# Run 115 (H100): the d64 fused backward with 64-row query steps (half the score tiles' registers: the 128-row
# default spills 396 / 792 bytes, run 113), bwd_bench at d64 S4k N / C with cuDNN in the same process.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run115_device.txt 2>&1
V1="block_q_dkv=64"; V2="block_q_dkv=64,stagger_consumers=True"
timeout 420 python3 benchmarks/bwd_bench.py --cells d64-4k-N,d64-4k-C --variant $V1 --variant $V2 --only "ours,ours[$V1],ours[$V2],cudnn" --out $OUT/run115 > $OUT/run115.log 2>&1
echo "rc $? $((SECONDS-T0)) s"; grep -v -i warn $OUT/run115.log | tail -14 | cut -c1-150
