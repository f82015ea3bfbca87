# Run 135 (H100): the d128 backward with dropout 0.1 under the no-dropout default's options (Q in registers in the
# dQ kernel, staggered consumers) and the causal forward on three consumers at S16k, against the dropout default.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
D=benchmarks/results/dropout_bwd_2026-11-24_h100
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run135_device.txt 2>&1
MOSAIC_GPU_DUMP_PTXAS=1 timeout 540 python3 $D/drop_ab.py d128-16k-C,d128-4k-C dq_rows_in_registers=1 \
  stagger_consumers=True dq_rows_in_registers=1,stagger_consumers=True fwd:consumers=3,persistent=False \
  > $OUT/run135.log 2>&1
echo "rc $? $((SECONDS-T0)) s"
grep -E "C7512|Registers are spilled" $OUT/run135.log | sed 's/for the function.*//' | sort | uniq -c
grep -E "^d|^  [a-z]" $OUT/run135.log
