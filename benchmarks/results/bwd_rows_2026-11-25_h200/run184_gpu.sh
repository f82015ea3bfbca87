# Run 184 (H200): d128 non-causal, the cells furthest from cuDNN (run 183: 0.93). The dQ kernel's 128-key steps
# (level on an H100 before Q moved into registers; +1-8% with dropout), with Q in registers and without; against
# the default of the same process (cfg_ab.py: each compiled twice, interleaved, gradients bitwise).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run184_device.txt 2>&1
timeout 300 python3 benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py d128-4k-N,d128-16k-N block_kv_dq=128 block_kv_dq=128,dq_rows_in_registers=0 > $OUT/run184.log 2>&1
echo "d128 rc $? $((SECONDS-T0)) s"; grep -E "^d|^  " $OUT/run184.log
