# branch exp-dropout-regs: dropout's keep bits applied to P's bf16 copy (forward) and Z P^T converted at once (dK/dV): ptxas + speed
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
( for v in "N drop" "C drop"; do echo "==== $v"; MOSAIC_GPU_DUMP_PTXAS=1 timeout 100 python3 .scratch/ptxas_dropout.py $v 2>&1 | grep -E "spill|Compiling entry"; done > $OUT/ptxas.log ) &
PT=$!
timeout 300 python3 benchmarks/bwd_bench.py --cells d128-4k-N,d128-4k-C --dropout 0.1 --only "ours,ours dropout,triton dropout" --reps 5 --min-ms 30 --out $OUT/bench > $OUT/bench.log 2>&1
echo "bench rc $? $((SECONDS-T0)) s"; grep -E "^d|TFLOP|failed" $OUT/bench.log | tail -8
wait $PT
grep -E "====|spill stores" $OUT/ptxas.log | sed 's/ptxas warning : Registers are spilled to local memory in function//' | cut -c1-160
echo "total $((SECONDS-T0)) s"
# D5 ran on a throwaway branch (exp-dropout-regs, deleted): in forward.py's to_pv the keep bits selected P's bf16
# copy (p16 = where(keep, p.astype(bf16), 0)); in backward.py's dK/dV step Z P^T was converted at once
# (where(keep, p, 0).astype(bf16)). Same ptxas spills, no speed change: not kept.
