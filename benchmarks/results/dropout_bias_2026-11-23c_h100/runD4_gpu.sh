# d64 dropout: the two-kernel Mosaic backward against the fused default and Triton; ALiBi d128 S16k C re-measure
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 250 python3 benchmarks/bwd_bench.py --cells d64-4k-N,d64-4k-C,d64-16k-C --dropout 0.1 --variant fused=False --variant fused=False,block_q_dkv=64 --reps 3 --min-ms 30 --out $OUT/d64 > $OUT/d64.log 2>&1; grep -E "^d|TFLOP|failed" $OUT/d64.log | tail -24
echo "d64 $((SECONDS-T0)) s"
timeout $((500-(SECONDS-T0))) python3 benchmarks/bwd_bench.py --cells d128-16k-C,d128-16k-N --alibi --only "ours,ours alibi,cudnn" --reps 5 --min-ms 30 --out $OUT/alibi > $OUT/alibi.log 2>&1; grep -E "^d|TFLOP|failed" $OUT/alibi.log | tail -8
echo "total $((SECONDS-T0)) s"
