# Run 111 (H100): bwd_order_ab.py — the causal backward's launch order (longest tiles first over the whole grid).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
R=benchmarks/results/bwd_order_2026-11-24_h100
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run111_device.txt 2>&1
timeout 540 python3 $R/bwd_order_ab.py > $OUT/run111.log 2>&1
echo "rc $?"; grep -v -i warn $OUT/run111.log | grep -v "^E1124\|constant\|Constant\|bug\|transpose\|operation took" | tail -8
