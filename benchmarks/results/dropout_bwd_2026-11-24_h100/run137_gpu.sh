# Run 137 (H100): the dropout backward A/B a third time over the four d128 cells: 128-key dQ steps, with and
# without staggered consumers, against the dropout default.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
D=benchmarks/results/dropout_bwd_2026-11-24_h100
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run137_device.txt 2>&1
timeout 500 python3 $D/drop_ab.py d128-16k-C,d128-4k-C,d128-16k-N,d128-4k-N block_kv_dq=128 \
  stagger_consumers=True,block_kv_dq=128 > $OUT/run137.log 2>&1
echo "rc $? $((SECONDS-T0)) s"
grep -E "^d|^  [a-z]" $OUT/run137.log
