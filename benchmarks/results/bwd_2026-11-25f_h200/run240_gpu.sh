# Run 240 (H200, branch h-scores-ahead): after run 239 (the unread copies must run to gain at S16k N): do they need
# to be TMA copies, and where? probe_ring_how: "first" (before the Q / dO copies), "arrive" (two mbarrier arrivals
# in their place, no TMA), against "after" (runs 234-239), on the d128 non-causal cells.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run240_device.txt 2>&1
P="row_ring=True,probe_ring_nowait=True"
timeout $((575-(SECONDS-T0))) python3 benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py d128-16k-N,d128-4k-N \
  $P "$P,probe_ring_how='first'" "$P,probe_ring_how='arrive'" > $OUT/run240_ab.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"
grep -v "^ *$" $OUT/run240_ab.log | tail -12
