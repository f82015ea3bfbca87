# Run 195 (H200): causal d128, the default (232 registers per dK/dV consumer) against 240 (runs 189-192: -6% at S16k C,
# +1-2% at S4k C) on the shapes of run 194 (shapes_ab.py C), causal.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run195_device.txt 2>&1
timeout 560 python3 benchmarks/results/bwd_2026-11-25b_h200/shapes_ab.py C > $OUT/run195.log 2>&1
echo "rc $? $((SECONDS-T0)) s"; grep -v WARNING $OUT/run195.log | tail -8
