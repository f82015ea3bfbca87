# Run 48: with the key rings, is the d64 dropout default (two kernels, 64-row query steps, chosen in runs D3-D4
# with global key loads) still the fastest? Against fused=True and 128-row steps; Triton dropout as the peer.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 580 python3 benchmarks/bwd_bench.py --cells d64-4k-N,d64-4k-C,d64-16k-C --dropout 0.1 --variant fused=True --variant block_q_dkv=128 --only "ours,ours dropout,triton dropout,ours[fused=True],ours[block_q_dkv=128]" --reps 3 --min-ms 30 --out $OUT/bench > $OUT/bwd_bench.log 2>&1
echo "bench rc $?"; grep -v -i warning $OUT/bwd_bench.log | grep -E "^d|TFLOP|failed|Error" | tail -20
