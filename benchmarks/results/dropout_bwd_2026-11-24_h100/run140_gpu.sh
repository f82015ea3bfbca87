# Run 140 (H100): on top of the new d128 dropout backward default (128-key dQ steps; staggered from S16k where
# causal), the options not timed with it: persistent dK/dV, 3 stages, three dQ consumers.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
D=benchmarks/results/dropout_bwd_2026-11-24_h100
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run140_device.txt 2>&1
timeout 400 python3 $D/drop_ab.py d128-16k-N,d128-16k-C persistent=True num_stages=3 dq_consumers=3 \
  > $OUT/run140.log 2>&1
echo "rc $? $((SECONDS-T0)) s"
grep -E "^d|^  [a-z]" $OUT/run140.log
