# Run 214 (H200): the d128 opt-in (deterministic=False: the fused kernel with f32 adds, the ring and the stagger)
# with a persistent launch, and without the stagger, against the opt-in and the two-kernel default, S4k N / S16k N.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run214_device.txt 2>&1
F=deterministic=False,prefetch_rows=False,row_ring=True
timeout 560 python3 benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py d128-4k-N,d128-16k-N $F "$F,persistent=True" "$F,stagger_consumers=False" > $OUT/run214.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"; grep "^d128\|^  " $OUT/run214.log | cut -c1-150
