# Run 234 (H200, branch h-scores-ahead): run 233's probe again (the row ring filled and waited, its rows unread, the
# default's prefetched rows used), without the wait (probe_ring_nowait: the producer's copies alone), and without the
# stagger; the d128 cells, causal too.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run234_device.txt 2>&1
timeout $((575-(SECONDS-T0))) python3 benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py d128-16k-N,d128-4k-N,d128-16k-C,d128-4k-C \
  row_ring=True row_ring=True,probe_ring_nowait=True row_ring=True,stagger_consumers=False > $OUT/run234_ab.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"
grep -v "^ *$" $OUT/run234_ab.log | tail -20
