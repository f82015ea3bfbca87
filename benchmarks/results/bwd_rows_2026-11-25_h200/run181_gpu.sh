# Run 181 (H200): d128 after run 180 (persistent lost 5-11%). The two dK/dV-kernel knobs that prefetch_rows may
# have moved since they were tuned: a third Q / dO stage, and the consumers not staggered; against the default of
# the same process (cfg_ab.py: each compiled twice, interleaved, gradients bitwise).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run181_device.txt 2>&1
timeout 500 python3 benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py d128-4k-N,d128-16k-N,d128-16k-C num_stages=3 stagger_consumers=False > $OUT/run181.log 2>&1
echo "d128 rc $? $((SECONDS-T0)) s"; grep -E "^d|^  " $OUT/run181.log
