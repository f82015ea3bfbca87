# Run 142 (H100): the d128 backward with ALiBi, config A/B in one process (drop_ab.py with AB_FEATURE=alibi) at the
# two cells where ALiBi read below 0.95 of no bias in runs 138-139 (S4k N, S16k N): the no-bias default's options off
# one at a time, and 128-key dQ steps (what dropout now takes).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run142_device.txt 2>&1
AB_FEATURE=alibi timeout 500 python3 benchmarks/results/dropout_bwd_2026-11-24_h100/drop_ab.py d128-4k-N,d128-16k-N \
  stagger_consumers=False dq_rows_in_registers=0 block_kv_dq=128 > $OUT/run142.log 2>&1
echo "rc $? $((SECONDS-T0)) s"
grep -E "^d|^  [a-z]|Error|error" $OUT/run142.log | head -40
