# registers 232/40 vs 240/24 for the forward and the two-kernel backward (d128), with and without dropout
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
MOSAIC_GPU_DUMP_PTXAS=1 timeout 400 python3 .scratch/regs_exp.py d128-4k-N,d128-4k-C,d128-16k-C > $OUT/regs.log 2> $OUT/regs_ptxas.log
echo "rc $? $((SECONDS-T0)) s"; grep TFLOP $OUT/regs.log
grep -E "==== compile|spill stores|Compiling entry" $OUT/regs_ptxas.log | grep -v "0 bytes spill stores" | sed 's/ptxas warning : Registers are spilled to local memory in function//' | grep -B1 "spill" | grep -v "^--" | cut -c1-150 | head -40
