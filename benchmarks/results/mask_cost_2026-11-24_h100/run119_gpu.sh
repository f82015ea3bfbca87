# Run 119 (H100): what the masked steps' element-wise mask costs (mask_ab.py), d64 / d128 at S4k, causal and not.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run119_device.txt 2>&1
timeout 500 python3 benchmarks/results/mask_cost_2026-11-24_h100/mask_ab.py d64-4k-C,d128-4k-C,d64-4k-N > $OUT/run119.log 2>&1
echo "rc $? $((SECONDS-T0)) s"; grep -E "^d|^  " $OUT/run119.log
