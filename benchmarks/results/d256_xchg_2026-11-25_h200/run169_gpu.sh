# Run 169 (H200), branch h-rows-bound: a bound on what the dK/dV kernel's per-step global loads of lse2 and delta
# (ahead of each step's score GEMMs, whose accumulators they initialise) cost. `rows_fixed=True` loads query tile
# 0's every step (an L1 hit after the first; wrong gradients), against the default; cfg_ab.py, d128 (two kernels)
# and d64 (the fused kernel).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run169_device.txt 2>&1
timeout 400 python3 benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py d128-4k-N,d128-16k-N,d128-16k-C,d64-4k-N rows_fixed=True > $OUT/run169.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"; grep -E "^d|^  " $OUT/run169.log
