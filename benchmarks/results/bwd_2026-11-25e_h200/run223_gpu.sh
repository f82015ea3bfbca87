# Run 223 (H200): where the d128 S16k N backward kernels' warps wait, per SASS instruction. Nsight Compute's
# SourceCounters (warp stall sampling) on the default's dK/dV and dQ kernels and on the opt-in's fused kernel
# (f32 adds), one launch each; the source page as CSV, summarised by sass_stalls.py.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
D=benchmarks/results/bwd_2026-11-25e_h200
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run223_device.txt 2>&1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1); echo "ncu: $NCU"; $NCU --version | tail -1
F="ours[deterministic=False,prefetch_rows=False,row_ring=True,stagger_consumers=False]"
for spec in "dkdv|ours|mosaic_dkdv" "dq|ours|mosaic_dq" "fused|$F|mosaic_dkdv"; do
  IFS='|' read tag impl kern <<< "$spec"
  timeout 170 $NCU --clock-control none --target-processes all -k "regex:$kern" --launch-count 1 \
    --section SourceCounters --section WarpStateStats --section SpeedOfLight -f -o $OUT/run223_$tag \
    python3 benchmarks/results/bwd_ncu_2026-11-24_h100/ncu_one.py 128 16384 N "$impl" > $OUT/run223_$tag.log 2>&1
  echo "$tag profile rc $? $((SECONDS-T0)) s"
  $NCU -i $OUT/run223_$tag.ncu-rep --page source --csv --print-source sass > $OUT/run223_${tag}_sass.csv 2> $OUT/run223_${tag}_sass.err \
    || $NCU -i $OUT/run223_$tag.ncu-rep --page source --csv > $OUT/run223_${tag}_sass.csv 2>> $OUT/run223_${tag}_sass.err
  echo "$tag source rc $? $(wc -l < $OUT/run223_${tag}_sass.csv) lines"
  $NCU -i $OUT/run223_$tag.ncu-rep --page details --csv > $OUT/run223_${tag}_details.csv 2>/dev/null
  gzip -f $OUT/run223_${tag}_sass.csv
done
ls -la $OUT
python3 $D/sass_stalls.py $OUT/run223_dkdv_sass.csv.gz $OUT/run223_dq_sass.csv.gz $OUT/run223_fused_sass.csv.gz 2>&1 | head -120
