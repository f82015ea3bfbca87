# Run 141 (H100): the persistent dK/dV kernel on top of the new d128 dropout backward default, again, over the four
# cells (run 140: +3 / +6% at S16k N, +2 / +2% at S16k C).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
D=benchmarks/results/dropout_bwd_2026-11-24_h100
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run141_device.txt 2>&1
timeout 450 python3 $D/drop_ab.py d128-16k-N,d128-16k-C,d128-4k-N,d128-4k-C persistent=True > $OUT/run141.log 2>&1
echo "rc $? $((SECONDS-T0)) s"
grep -E "^d|^  [a-z]" $OUT/run141.log
