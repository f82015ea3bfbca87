# Run 180 (H200): d128, the cells still short of cuDNN. The persistent dK/dV kernel (which moved d64 by +5-7% in
# runs 177-178, after runs 116-117 found it level at d128 on an H100) on the d128 default with prefetch_rows, against
# the default of the same process (cfg_ab.py: each compiled twice, interleaved, gradients bitwise).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run180_device.txt 2>&1
timeout 560 python3 benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py d128-4k-N,d128-4k-C,d128-16k-N,d128-16k-C,d128-128k-C persistent=True > $OUT/run180.log 2>&1
echo "d128 rc $? $((SECONDS-T0)) s"; grep -E "^d|^  " $OUT/run180.log
