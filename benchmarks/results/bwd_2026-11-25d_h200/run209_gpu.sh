# Run 209 (H200): where the ordered adds' 22% goes (run 208: 0.78x the two-kernel default, the unordered f32
# fused kernel 1.03-1.08x). Probes (config field ordered_probe, branch h-ordered-adds only): nosync (rotation and
# rounds of whole heads, no semaphore, no completion wait: unordered), nowait (completion waits and signals, no
# semaphore wait: unordered), early (ordered, each add signalled after the next step's score GEMMs instead of at
# the next add). Bits of `early` checked first (check_ordered.py with the probe).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
D=benchmarks/results/bwd_2026-11-25d_h200
T0=$SECONDS
{ date -u; git log --oneline -1; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run209_device.txt 2>&1
PF_PROBE=early timeout 200 python3 $D/check_ordered.py > $OUT/run209_check.log 2>&1
echo "check rc $? $((SECONDS-T0)) s"; tail -5 $OUT/run209_check.log
O=fused=True,ordered_adds=True,prefetch_rows=False,row_ring=True
timeout 330 python3 benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py d128-4k-N,d128-16k-N $O "$O,ordered_probe=\"nosync\"" "$O,ordered_probe=\"nowait\"" "$O,ordered_probe=\"early\"" > $OUT/run209.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"; tail -14 $OUT/run209.log
