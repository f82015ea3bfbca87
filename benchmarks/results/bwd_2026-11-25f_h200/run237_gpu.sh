# Run 237 (H200, branch h-scores-ahead): Nsight Compute on the d128 S16k N dK/dV kernel, the default against run 234's
# probe (the row ring filled by the producer, never waited or read), one launch each: where the probe's 3% comes from.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run237_device.txt 2>&1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
for spec in "default|ours" "probe|ours[row_ring=True,probe_ring_nowait=True]"; do
  IFS='|' read tag impl <<< "$spec"
  timeout 200 $NCU --clock-control none --target-processes all -k "regex:mosaic_dkdv" --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy \
    --metrics sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,smsp__cycles_active.avg \
    -f -o $OUT/run237_$tag python3 benchmarks/results/bwd_ncu_2026-11-24_h100/ncu_one.py 128 16384 N "$impl" > $OUT/run237_$tag.log 2>&1
  echo "$tag rc $? $((SECONDS-T0)) s"
  $NCU -i $OUT/run237_$tag.ncu-rep --page details --csv > $OUT/run237_${tag}_details.csv 2>/dev/null
  rm -f $OUT/run237_$tag.ncu-rep
done
python3 - <<'PY'
import csv, os
out = os.environ["OUT"]
rows = {}
for tag in ("default", "probe"):
  with open(f"{out}/run237_{tag}_details.csv") as f:
    for r in csv.DictReader(f):
      key = (r["Section Name"], r["Metric Name"], r["Metric Unit"])
      rows.setdefault(key, {})[tag] = r["Metric Value"]
for (sec, name, unit), v in rows.items():
  if v.get("default") != v.get("probe"):
    print(f"{sec[:28]:28s} | {name[:48]:48s} | {unit[:8]:8s} | {v.get('default')} | {v.get('probe')}")
PY
