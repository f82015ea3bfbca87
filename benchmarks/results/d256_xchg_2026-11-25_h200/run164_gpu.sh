# Run 164 (H200): an upper bound on what the d256 exchange costs. Branch h-xchg-bound's `xchg_nosync=True` drops
# every named-barrier wait and arrive of backward._Exchange (wrong gradients: timing only), against the default,
# each compiled twice, interleaved in one process (bwd_ab_2026-11-24_h100/cfg_ab.py).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
D=benchmarks/results/bwd_ab_2026-11-24_h100
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run164_device.txt 2>&1
timeout 500 python3 $D/cfg_ab.py d256-4k-N,d256-4k-C,d256-1k-N xchg_nosync=True > $OUT/run164.log 2>&1
echo "rc $? $((SECONDS-T0)) s"; grep -E "^d|^  " $OUT/run164.log
