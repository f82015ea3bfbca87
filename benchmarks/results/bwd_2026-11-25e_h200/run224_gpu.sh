# Run 224 (H200): branch h-rows-early. Run 223 found the d128 dK/dV consumers stalled on the prefetched delta rows at
# the step's start (3.3% of all warp samples): rows_early issues that prefetch before dV's GEMM instead of after dK's.
# ptxas report and A/B; then ncu stall samples of the dQ kernel and of the opt-in's fused kernel (run 223's files
# did not all come back).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run224_device.txt 2>&1
MOSAIC_GPU_DUMP_PTXAS=1 timeout 100 python3 benchmarks/results/bwd_2026-11-25e_h200/ptxas_variant.py d128-4k-N rows_early=True > /tmp/ptx.log 2>&1
grep -E "^==== variant|spill|Performance Loss" /tmp/ptx.log | cut -c1-150 | tee $OUT/run224_ptxas.txt
timeout 300 python3 benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py d128-4k-N,d128-16k-N,d128-16k-C rows_early=True > $OUT/run224.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"; grep "^d128\|^  " $OUT/run224.log | cut -c1-150
NCU=/usr/local/cuda/bin/ncu
F="ours[deterministic=False,prefetch_rows=False,row_ring=True,stagger_consumers=False]"
for spec in "dq|ours|mosaic_dq" "fused|$F|mosaic_dkdv"; do
  IFS='|' read tag impl kern <<< "$spec"
  timeout 100 $NCU --clock-control none --target-processes all -k "regex:$kern" --launch-count 1 \
    --section SourceCounters --section WarpStateStats -f -o /tmp/run224_$tag \
    python3 benchmarks/results/bwd_ncu_2026-11-24_h100/ncu_one.py 128 16384 N "$impl" > /tmp/run224_$tag.log 2>&1
  $NCU -i /tmp/run224_$tag.ncu-rep --page source --csv --print-source sass | gzip > $OUT/run223_${tag}_sass.csv.gz
  echo "$tag rc $? $((SECONDS-T0)) s"
done
python3 benchmarks/results/bwd_2026-11-25e_h200/sass_stalls.py $OUT/run223_dq_sass.csv.gz $OUT/run223_fused_sass.csv.gz | head -70
