# Run 203 (H200, branch h-fixed-diag): where the fused d128 kernel's fixed-point dQ adds lose against its f32 adds
# (run 202: 0.86-0.96 against 1.06-1.08 of the two-kernel default). cfg_ab.py, the same process, variants of the
# fused fixed-point config F: fixed_diag=magic (22-bit words rounded by adding 1.5 * 2^23 in f32, no cvt: correct
# sums), bitcast (no cvt: wrong sums, a cost probe), noload (F not loaded: wrong sums, a cost probe), and f32 adds.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
AB=benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run203_device.txt 2>&1
cat $OUT/run203_device.txt
F=fused=True,prefetch_rows=False,row_ring=True
MOSAIC_GPU_DUMP_PTXAS=1 timeout 570 python3 $AB d128-4k-N,d128-16k-N,d128-16k-C $F $F,fixed_diag='"magic"' \
  $F,fixed_diag='"bitcast"' $F,fixed_diag='"noload"' $F,deterministic=False > $OUT/run203.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"; grep -E "^d|^  " $OUT/run203.log
grep -A3 "Compiling entry function 'pallas_flash_mosaic_dkdv" $OUT/run203.log | grep -E "spill stores" | cut -c1-120 | uniq
