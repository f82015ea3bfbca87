# Run 59: three consumers with dropout 0.1 (d128: the dQ kernel's; d64: both kernels' or the dQ kernel's) against
# the default with and without dropout, then d64 without dropout: the two kernels with three consumers against the
# fused default and cuDNN.  One process per cell (bwd_bench).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
T0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
B="python3 benchmarks/bwd_bench.py --reps 15"
timeout 200 $B --cells d128-4k-N,d128-4k-C,d128-16k-N,d128-16k-C --dropout 0.1 --variant dq_consumers=3 --only "ours,ours dropout,ours[dq_consumers=3]" --out $OUT/drop128 > $OUT/drop128.log 2>&1
echo "drop128 rc $? $((SECONDS-T0)) s"
timeout 180 $B --cells d64-4k-N,d64-4k-C,d64-16k-N,d64-16k-C --dropout 0.1 --variant consumers=3 --variant dq_consumers=3 --only "ours,ours dropout,ours[consumers=3],ours[dq_consumers=3]" --out $OUT/drop64 > $OUT/drop64.log 2>&1
echo "drop64 rc $? $((SECONDS-T0)) s"
timeout $((585-(SECONDS-T0))) $B --cells d64-4k-N,d64-4k-C,d64-16k-N,d64-16k-C --variant fused=False,consumers=3,block_q_dkv=128,block_kv_dq=128 --variant fused=False,consumers=3 --only "ours,ours[fused=False,consumers=3,block_q_dkv=128,block_kv_dq=128],ours[fused=False,consumers=3],cudnn" --out $OUT/d64 > $OUT/d64.log 2>&1
echo "d64 rc $? $((SECONDS-T0)) s"
for f in drop128 drop64 d64; do grep -v -i warning $OUT/$f.log | grep -E "^d|ours|cudnn " | sed 's/grad err.*spread/spread/' | cut -c1-110; done
