# Run 200 (H200): 240 registers per consumer at d64 with dropout (two kernels, 64-row query steps, 232 / 40 today),
# each kernel against the d64 dropout default of the same process (drop_ab.py, dropout 0.1).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
DAB=benchmarks/results/dropout_bwd_2026-11-24_h100/drop_ab.py
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run200_device.txt 2>&1
timeout 330 python3 $DAB d64-4k-N,d64-16k-C dkdv_registers=240 dq_registers=240 > $OUT/run200.log 2>&1
echo "rc $? $((SECONDS-T0)) s"; grep -E "^d|^  " $OUT/run200.log | grep -v WARNING
