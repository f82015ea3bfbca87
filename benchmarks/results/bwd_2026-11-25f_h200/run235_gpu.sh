# Run 235 (H200, branch h-scores-ahead): is run 234's gain the producer's row copies or only the ring's allocation?
# probe_ring_nocopy: the ring's shared memory and barriers allocated, nothing copied or waited; against
# probe_ring_nowait (copied, not waited) and the default, on the d128 cells.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run235_device.txt 2>&1
timeout $((575-(SECONDS-T0))) python3 benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py d128-16k-N,d128-4k-N,d128-4k-C \
  row_ring=True,probe_ring_nowait=True row_ring=True,probe_ring_nocopy=True > $OUT/run235_ab.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"
grep -v "^ *$" $OUT/run235_ab.log | tail -20
