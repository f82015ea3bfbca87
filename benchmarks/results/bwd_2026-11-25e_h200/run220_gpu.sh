# Run 220 (H200): branch h-dq-stream. The dQ kernel on XLA's explicit stream 1 (jax.experimental.compute_on,
# "gpu_stream:1"), so it can run beside the dK/dV kernel and fill its last wave. First the optimized HLO's
# scheduling of the two kernels, then the A/B against the default on the d128 cells.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run220_device.txt 2>&1
timeout 120 python3 benchmarks/results/bwd_2026-11-25e_h200/hlo_streams.py > $OUT/run220_hlo.txt 2>&1
echo "hlo rc $? $((SECONDS-T0)) s"; head -c 3000 $OUT/run220_hlo.txt
timeout $((570-(SECONDS-T0))) python3 benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py d128-4k-N,d128-16k-N,d128-4k-C,d128-16k-C dq_stream=1 > $OUT/run220.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"; grep "^d128\|^  " $OUT/run220.log | cut -c1-150
