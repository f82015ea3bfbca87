# Run 202 (H200): the d128 fused kernel for real (after the smem_bytes fix), against the two-kernel default of the
# same process (cfg_ab.py prints each executable's Mosaic GPU kernel count: fused 2), with ptxas's spill report.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
AB=benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run202_device.txt 2>&1
cat $OUT/run202_device.txt
F=fused=True,prefetch_rows=False,row_ring=True
MOSAIC_GPU_DUMP_PTXAS=1 timeout 560 python3 $AB d128-4k-N,d128-16k-N $F $F,persistent=True $F,deterministic=False \
  fused=True,prefetch_rows=False > $OUT/run202.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"; grep -E "^d|^  " $OUT/run202.log
grep -A3 "Compiling entry function 'pallas_flash_mosaic_dkdv" $OUT/run202.log | grep -E "spill stores|Used" | cut -c1-120 | uniq -c
