# Run 120 (H100): the masked steps' mask as per-row spans against the element-wise compares it replaced
# (span_ab.py, one process per run, bitwise-equal check), causal d64 / d128 at S4k and S16k, d128 S4k N as control.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run120_device.txt 2>&1
timeout 520 python3 benchmarks/results/mask_cost_2026-11-24_h100/span_ab.py d64-4k-C,d128-4k-C,d64-16k-C,d128-16k-C,d128-4k-N > $OUT/run120.log 2>&1
echo "rc $? $((SECONDS-T0)) s"; grep -E "^d|^  " $OUT/run120.log
