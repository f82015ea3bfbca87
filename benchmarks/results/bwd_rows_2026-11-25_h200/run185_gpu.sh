# Run 185 (H200): run 184 found the dQ kernel's 128-key steps with Q from shared memory +1 / +3% at d128 S4k N /
# S16k N; the causal cells, as run 184.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run185_device.txt 2>&1
timeout 300 python3 benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py d128-4k-C,d128-16k-C,d128-128k-C block_kv_dq=128,dq_rows_in_registers=0 > $OUT/run185.log 2>&1
echo "d128 rc $? $((SECONDS-T0)) s"; grep -E "^d|^  " $OUT/run185.log
