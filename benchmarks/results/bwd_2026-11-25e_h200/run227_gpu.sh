# Run 227 (H200): main. The d256 form (split_head_dim: the consumers share one 64-row tile, split the score work
# through the exchange and each accumulate half of the head dim's columns) at d128, never timed there: with the
# d128 default's 128-key dQ steps and with d256's 64-key ones, against the default. A/B, bitwise against it.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run227_device.txt 2>&1
V1=split_head_dim=True,prefetch_rows=False,row_ring=True,stagger_consumers=False,dkdv_registers=None
V2=$V1,block_kv_dq=64
timeout 400 python3 benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py d128-4k-N,d128-16k-N $V1 $V2 > $OUT/run227.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"; grep "^d128\|^  " $OUT/run227.log | cut -c1-150
