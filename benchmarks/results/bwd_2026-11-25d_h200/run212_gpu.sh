# Run 212 (H200): the fused kernel's dQ share accumulator scoped after the dV / dK GEMMs' issue (late_dq_acc, branch
# h-late-dq), so its 32 registers are not live while dS^T is computed under the dV GEMM. d64: against the default
# (the fused fixed-point kernel; bits must match); d128: the f32 opt-in (deterministic=False) with and without it.
# ptxas's spill lines from MOSAIC_GPU_DUMP_PTXAS.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run212_device.txt 2>&1
A=benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py
F=deterministic=False,prefetch_rows=False,row_ring=True
MOSAIC_GPU_DUMP_PTXAS=1 timeout 280 python3 $A d64-4k-N,d64-16k-C late_dq_acc=True > $OUT/run212_d64.log 2>&1
echo "d64 rc $? $((SECONDS-T0)) s"; grep -v "^ptxas\|^$" $OUT/run212_d64.log | grep -v "Compiling\|Function properties\|Used \|bytes stack\|^[ 	]" | tail -8
MOSAIC_GPU_DUMP_PTXAS=1 timeout $((560-(SECONDS-T0))) python3 $A d128-4k-N,d128-16k-N $F "$F,late_dq_acc=True" > $OUT/run212_d128.log 2>&1
echo "d128 rc $? $((SECONDS-T0)) s"; grep "^d128\|^  " $OUT/run212_d128.log | tail -8
grep -h "spill" $OUT/run212_d64.log $OUT/run212_d128.log | sort | uniq -c | head -20
