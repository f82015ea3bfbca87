# Run 189 (H200): the d128 dK/dV kernel spills 36-72 bytes with the default's prefetched rows (run 188's ptxas
# report). dkdv_registers=240 gives its consumers 240 registers and the producer 24 (the fused kernel's split; run 36
# on an H100, before the prefetch, had measured it at -4% to +5%), against the d128 default of the same process
# (cfg_ab.py), with and without the prefetch (the row ring instead), with ptxas's spill report.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
AB=benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run189_device.txt 2>&1
MOSAIC_GPU_DUMP_PTXAS=1 timeout 560 python3 $AB d128-4k-N,d128-16k-N,d128-16k-C dkdv_registers=240 \
  dkdv_registers=240,prefetch_rows=False,row_ring=True > $OUT/run189.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"; grep -E "^d|^  " $OUT/run189.log
grep -E "dkdv_mosaic_gpu_kernel'|dkdv_mosaic_gpu_kernel$|spill stores" $OUT/run189.log | grep -A1 "Function properties for pallas_flash_mosaic_dkdv" | grep "spill stores" | uniq -c
