# Run 208 (H200): the fused kernel with ordered f32 dQ adds (ordered_adds: rotated query order, rounds of whole
# heads, a global semaphore per (query tile, head, column block)) natively: correctness and bits first (each
# call under a timeout, a wrong rank would hang), then A/B against the two-kernel default and the unordered f32
# fused kernel (deterministic=False) at d128 S4k N / S16k N.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
D=benchmarks/results/bwd_2026-11-25d_h200
T0=$SECONDS
{ date -u; git log --oneline -1; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run208_device.txt 2>&1
cat $OUT/run208_device.txt
timeout 240 python3 $D/check_ordered.py > $OUT/run208_check.log 2>&1
echo "check rc $? $((SECONDS-T0)) s"; tail -8 $OUT/run208_check.log
O=fused=True,ordered_adds=True,prefetch_rows=False,row_ring=True
F=deterministic=False,prefetch_rows=False,row_ring=True
timeout 300 python3 benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py d128-4k-N,d128-16k-N $O $F > $OUT/run208.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"; tail -12 $OUT/run208.log
