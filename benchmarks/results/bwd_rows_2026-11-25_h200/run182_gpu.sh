# Run 182 (H200): run 181 found the unstaggered d128 default +2.7 / +3.6% at S16k C (the stagger was taken on an
# H100 before prefetch_rows, runs 96-100); the causal cells again with S4k C and S128k C, as run 181.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run182_device.txt 2>&1
timeout 400 python3 benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py d128-4k-C,d128-16k-C,d128-128k-C stagger_consumers=False > $OUT/run182.log 2>&1
echo "d128 rc $? $((SECONDS-T0)) s"; grep -E "^d|^  " $OUT/run182.log
