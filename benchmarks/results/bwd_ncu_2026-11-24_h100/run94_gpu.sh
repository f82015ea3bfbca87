# Run 94 (H100): Nsight Compute on the backward kernels of ours (dK/dV, dQ) and cuDNN at d128 S16k N and S4k N,
# the second fwd+bwd call of each (the first compiles): throughput, pipes, shared memory, warp stall reasons.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
D=benchmarks/results/bwd_ncu_2026-11-24_h100
T0=$SECONDS
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1); echo "ncu: $NCU"; $NCU --version | tail -1
for cell in "128 16384 N" "128 4096 N"; do for impl in ours cudnn; do
  tag=$(echo $cell | tr ' ' _)_$impl
  timeout 135 $NCU --clock-control none --target-processes all -k "regex:mosaic_dkdv|mosaic_dq|bprop|dgrad|bwd" \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy \
    --page raw --csv python3 $D/ncu_one.py $cell $impl > $OUT/run94_$tag.csv 2> $OUT/run94_$tag.err
  echo "$tag rc $? $((SECONDS-T0)) s $(wc -l < $OUT/run94_$tag.csv) lines"
done; done
python3 - <<'PY'
import csv, glob, os
keys = ["gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
        "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
        "sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active",
        "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed",
        "lts__throughput.avg.pct_of_peak_sustained_elapsed", "launch__registers_per_thread",
        "smsp__issue_active.avg.pct_of_peak_sustained_active"]
for path in sorted(glob.glob(os.environ["OUT"] + "/run94_*.csv")):
  rows = list(csv.reader(open(path)))
  start = next((i for i, r in enumerate(rows) if r and r[0] == "ID"), None)
  if start is None: print(path, "no table"); continue
  head = rows[start]
  for r in rows[start + 2:]:
    d = dict(zip(head, r))
    print(os.path.basename(path), d.get("Kernel Name", "")[:50])
    for k in keys:
      print("   ", k, d.get(k))
    stalls = sorted(((float(v.replace(",", "")), k) for k, v in d.items() if "warp_latency_issue_stalled" in k and k.endswith("ratio") and v.replace(",", "").replace(".", "").isdigit()), reverse=True)[:6]
    for v, k in stalls: print("    stall", k.split("stalled_")[-1], v)
PY
