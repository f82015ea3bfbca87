# Run 170 (H200), branch h-prefetch-rows: `prefetch_rows=True` loads the next step's lse2 and delta while the
# step's last GEMMs run (`_accumulate(then=)`, carried into the next step), instead of at the step's start ahead of
# the score GEMMs whose accumulators they initialise (run 169's bound: 2-7%). Two-kernel d128 and fused d64 dK/dV
# kernels; against the default, cfg_ab.py (each compiled twice, interleaved, gradients bitwise).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run170_device.txt 2>&1
timeout 500 python3 benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py d128-4k-N,d128-16k-N,d128-4k-C,d128-16k-C,d64-4k-N,d64-4k-C prefetch_rows=True > $OUT/run170.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"; grep -E "^d|^  " $OUT/run170.log
