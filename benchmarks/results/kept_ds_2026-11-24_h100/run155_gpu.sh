# Run 155 (H100): the A/B of run 154 again with a fresh traced function per compile (run 154 timed one form twice:
# jit reused the first trace), over the four d128 cells.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
D=benchmarks/results/kept_ds_2026-11-24_h100
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,temperature.gpu --format=csv; } > $OUT/run155_device.txt 2>&1
timeout $((590-(SECONDS-T0))) python3 $D/kept_ab.py d128-16k-C,d128-16k-N,d128-4k-N,d128-4k-C > $OUT/run155_ab.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"
grep -E "^d" $OUT/run155_ab.log
