# Run 239 (H200, branch h-scores-ahead): code placement or execution? The unread ring's copies compiled but never
# executed (probe_ring_dead: under a condition false at run time) against the executed ones (probe_ring_nowait) and
# none (probe_ring_nocopy), on the d128 non-causal cells.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run239_device.txt 2>&1
P="row_ring=True,probe_ring_nowait=True"
timeout $((575-(SECONDS-T0))) python3 benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py d128-16k-N,d128-4k-N \
  $P $P,probe_ring_dead=True row_ring=True,probe_ring_nocopy=True > $OUT/run239_ab.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"
grep -v "^ *$" $OUT/run239_ab.log | tail -12
