# issue 14: branch h4-mosaic-dropout: where the Mosaic dropout time goes (ptxas spills, fused vs two kernels)
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
cd .wt/h4 && export PYTHONPATH=$PWD
T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
( for v in "N nodrop" "N drop" "C nodrop" "C drop" "N drop fused"; do echo "==== $v"; MOSAIC_GPU_DUMP_PTXAS=1 timeout 100 python3 ../../.scratch/ptxas_dropout.py $v 2>&1 | grep -E "spill|Compiling entry"; done > $OUT/ptxas.log ) &
PT=$!
timeout 400 python3 benchmarks/bwd_bench.py --cells d128-4k-N,d128-4k-C --dropout 0.1 --variant fused=True --variant deterministic=False --only "ours,ours dropout,triton dropout,ours[fused=True],ours[deterministic=False]" --reps 3 --min-ms 30 --out $OUT/bench > $OUT/bench.log 2>&1
echo "bench rc $? $((SECONDS-T0)) s"; grep -v WARNING $OUT/bench.log | grep -E "^d|TFLOP|failed" | tail -14
wait $PT
grep -E "====|spill stores|Compiling entry" $OUT/ptxas.log | sed 's/ptxas warning : Registers are spilled to local memory in function//' | cut -c1-160
echo "total $((SECONDS-T0)) s"
