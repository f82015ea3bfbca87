# Run 225 (H200): branch h-defer-dkdv. The deferred dV / dK wait (P^T, dS^T via shared memory) without the row
# prefetch, whose 32 registers of next-step rows run 222's spills may come from: the rows through the ring
# (row_ring, read from shared memory at the step's start). ptxas report and A/B, bitwise against the default.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run225_device.txt 2>&1
R=prefetch_rows=False,row_ring=True
V1=defer_dkdv_wait=True,$R
V2=$V1,stagger_consumers=False
MOSAIC_GPU_DUMP_PTXAS=1 timeout 100 python3 benchmarks/results/bwd_2026-11-25e_h200/ptxas_variant.py d128-4k-N $R $V1 $V2 > /tmp/ptx.log 2>&1
grep -E "^==== variant|spill|Performance Loss" /tmp/ptx.log | grep -v "0 bytes spill stores" | cut -c1-150 | tee $OUT/run225_ptxas.txt
timeout 400 python3 benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py d128-4k-N,d128-16k-N,d128-16k-C $R $V1 $V2 > $OUT/run225.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"; grep "^d128\|^  " $OUT/run225.log | cut -c1-150
