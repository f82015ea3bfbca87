# Run 95 (H100): Nsight Compute on the fused backward kernel at d128 (f32 adds: deterministic=False; fixed point:
# fused=True), S16k N and S4k C (there also the default and cuDNN), as run 94 did; ptxas's report of each in the .err files.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
D=benchmarks/results/bwd_ncu_2026-11-24_h100
T0=$SECONDS
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1); echo "ncu: $NCU"; $NCU --version | tail -1
export MOSAIC_GPU_DUMP_PTXAS=1
for cell in "128 16384 N" "128 4096 C"; do for impl in "ours[deterministic=False]" "ours[fused=True]" ours cudnn; do
  [ "$cell" = "128 16384 N" ] && [ ${impl:0:5} != "ours[" ] && continue
  tag=$(echo $cell | tr ' ' _)_$(echo "$impl" | tr -d '[]=' )
  timeout 135 $NCU --clock-control none --target-processes all -k "regex:mosaic_dkdv|mosaic_dq|bprop|dgrad|bwd" \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy \
    --page raw --csv python3 $D/ncu_one.py $cell "$impl" > $OUT/run95_$tag.csv 2> $OUT/run95_$tag.err
  echo "$tag rc $? $((SECONDS-T0)) s $(wc -l < $OUT/run95_$tag.csv) lines"
done; done
python3 $D/ncu_summary.py "$OUT/run95_*.csv"
grep -h -iE "spill|registers" $OUT/run95_*.err | sort | uniq -c | head -20
