# Run 201 (H200): the d128 fused kernel (five GEMM units, fixed-point dQ adds: bitwise deterministic) on today's
# code, against the two-kernel default of the same process (cfg_ab.py): with the row ring, persistent, and without
# the stagger; with ptxas's spill report of every kernel compiled.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
AB=benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run201_device.txt 2>&1
cat $OUT/run201_device.txt
F=fused=True,prefetch_rows=False,row_ring=True
MOSAIC_GPU_DUMP_PTXAS=1 timeout 560 python3 $AB d128-4k-N,d128-16k-N $F $F,persistent=True \
  $F,stagger_consumers=False > $OUT/run201.log 2> $OUT/run201_ptxas.log
echo "ab rc $? $((SECONDS-T0)) s"; grep -E "^d|^  " $OUT/run201.log
grep -E "Compiling entry|spill stores" $OUT/run201_ptxas.log | grep -B1 "spill stores" | grep -v "^--" | cut -c1-140 | uniq -c | head -30
