# Run 238 (H200, branch h-scores-ahead): run 237's pair again, the warp stall reasons of the dK/dV kernel (raw
# WarpStateStats metrics, cycles per issued instruction by reason), default against the unread-ring probe.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run238_device.txt 2>&1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
for spec in "default|ours" "probe|ours[row_ring=True,probe_ring_nowait=True]"; do
  IFS='|' read tag impl <<< "$spec"
  timeout 200 $NCU --clock-control none --target-processes all -k "regex:mosaic_dkdv" --launch-count 1 \
    --section WarpStateStats --section InstructionStats -f -o /tmp/run238_$tag \
    python3 benchmarks/results/bwd_ncu_2026-11-24_h100/ncu_one.py 128 16384 N "$impl" > $OUT/run238_$tag.log 2>&1
  echo "$tag rc $? $((SECONDS-T0)) s"
  $NCU -i /tmp/run238_$tag.ncu-rep --page raw --csv > $OUT/run238_${tag}_raw.csv 2>/dev/null
done
python3 - <<'PY'
import csv, os
out = os.environ["OUT"]
vals = {}
for tag in ("default", "probe"):
  rows = list(csv.reader(open(f"{out}/run238_{tag}_raw.csv")))
  names, units, data = rows[0], rows[1], rows[2]
  vals[tag] = {n: (u, d) for n, u, d in zip(names, units, data)}
keys = [k for k in vals["default"] if ("warp_latency_issue_stalled" in k or "inst_executed" in k or "warps_issue_stalled" in k) and k in vals["probe"]]
for k in sorted(keys):
  a, b = vals["default"][k][1], vals["probe"][k][1]
  if a != b:
    print(f"{k[:90]:90s} {a:>16s} {b:>16s}")
PY
