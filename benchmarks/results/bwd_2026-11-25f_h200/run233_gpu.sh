# Run 233 (H200, branch h-scores-ahead): where the row ring's cost at d128 lies. Probe: the ring filled by the producer
# and its barrier waited by the consumers, but the rows taken from the default's prefetch (row_ring + prefetch_rows
# without scores_ahead); against the default and the ring read as usual.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run233_device.txt 2>&1
timeout $((575-(SECONDS-T0))) python3 benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py d128-4k-N,d128-16k-N \
  row_ring=True row_ring=True,prefetch_rows=False > $OUT/run233_ab.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"
grep -v "^ *$" $OUT/run233_ab.log | tail -12
