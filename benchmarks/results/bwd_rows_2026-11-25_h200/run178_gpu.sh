# Run 178 (H200): run 177 found the persistent fused d64 kernel +6% at S4k N; the other d64 cells, as run 177
# (cfg_ab.py against the default of the same process, each compiled twice, interleaved, gradients bitwise).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run178_device.txt 2>&1
timeout 400 python3 benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py d64-4k-C,d64-16k-N,d64-16k-C persistent=True > $OUT/run178.log 2>&1
echo "d64 rc $? $((SECONDS-T0)) s"; grep -E "^d|^  " $OUT/run178.log
