# Run 125 (H100): the persistent dK/dV kernel on the cells it was not timed on (d256's split head dim, S128k C)
# and d64 S4k N again; cfg_ab.py: each config twice, interleaved, one process.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
D=benchmarks/results/bwd_ab_2026-11-24_h100
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run125_device.txt 2>&1
timeout 500 python3 $D/cfg_ab.py d256-4k-N,d256-4k-C,d256-1k-N,d128-128k-C,d64-4k-N persistent=True > $OUT/run125.log 2>&1
echo "rc $? $((SECONDS-T0)) s"; grep -E "^d|^  " $OUT/run125.log
