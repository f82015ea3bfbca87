# Run 222 (H200): branch h-defer-dkdv. defer_dkdv_wait: the d128 dK/dV kernel keeps dK / dV as wgmma accumulator
# refs over its steps (P^T, dS^T through shared memory) and does not wait for a step's dV / dK GEMMs; the next step's S^T wait covers them and frees
# the previous Q / dO slot. ptxas's report of the variants, then the A/B (bitwise against the default).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
D=benchmarks/results/bwd_2026-11-25e_h200
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run222_device.txt 2>&1
V1=defer_dkdv_wait=True
V2=defer_dkdv_wait=True,stagger_consumers=False
MOSAIC_GPU_DUMP_PTXAS=1 timeout 150 python3 $D/ptxas_variant.py d128-4k-N $V1 $V2 > $OUT/run222_ptxas.log 2>&1
echo "ptxas rc $? $((SECONDS-T0)) s"
grep -E "^==== variant|Compiling entry|spill|Performance Loss|Used [0-9]+ registers" $OUT/run222_ptxas.log | grep -v "^$" | sed 's/ptxas info    ://' | cut -c1-160 | head -40
timeout $((575-(SECONDS-T0))) python3 benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py d128-4k-N,d128-16k-N,d128-16k-C,d128-4k-C $V1 $V2 > $OUT/run222.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"; grep "^d128\|^  " $OUT/run222.log | cut -c1-150
