# Run 163 (H200): Nsight Compute on the d256 backward (split_head_dim, the two consumers' score exchange) against
# cuDNN's, at S4k N / C where run 162 read ours 0.960 / 0.989 of cuDNN, and at S1k N where it read 1.103: kernel
# times, tensor-pipe activity and warp stall reasons, with run 94's sections and its ncu_one.py / ncu_summary.py.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
D=benchmarks/results/bwd_ncu_2026-11-24_h100
T0=$SECONDS
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1); echo "ncu: $NCU"; $NCU --version | tail -1
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run163_device.txt 2>&1
for cell in "256 4096 N" "256 4096 C" "256 1024 N"; do for impl in ours cudnn; do
  [ $((SECONDS-T0)) -gt 430 ] && { echo "skip $cell $impl: time"; continue; }
  tag=$(echo $cell | tr ' ' _)_$impl
  timeout 90 $NCU --clock-control none --target-processes all -k "regex:mosaic_dkdv|mosaic_dq|bprop|dgrad|bwd" \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy \
    --page raw --csv python3 $D/ncu_one.py $cell $impl > $OUT/run163_$tag.csv 2> $OUT/run163_$tag.err
  echo "$tag rc $? $((SECONDS-T0)) s $(wc -l < $OUT/run163_$tag.csv) lines"
done; done
python3 $D/ncu_summary.py "$OUT/run163_*.csv" | tee $OUT/run163_summary.txt | grep -E "^==|duration|tensor_cycles|issue_active|stalls" | cut -c1-200
