# Run 124 (H100): the d128 forward's masked steps, per-row spans against the compares (fwd_rows_ab.py: each twice,
# interleaved, one process), causal S4k and S16k.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run124_device.txt 2>&1
timeout 300 python3 benchmarks/results/mask_cost_2026-11-24_h100/fwd_rows_ab.py d128-4k-C,d128-16k-C > $OUT/run124.log 2>&1
echo "rc $? $((SECONDS-T0)) s"; grep -E "^d|^  " $OUT/run124.log
