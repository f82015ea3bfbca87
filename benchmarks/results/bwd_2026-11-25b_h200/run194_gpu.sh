# Run 194 (H200): the d128 non-causal default's 240 registers per dK/dV consumer (runs 189-191) against 232 on
# shapes beside issue 12's cells (shapes_ab.py): GQA 32/8, packed sequences, head dim 96, fp16, soft-cap, kv lengths.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run194_device.txt 2>&1
timeout 560 python3 benchmarks/results/bwd_2026-11-25b_h200/shapes_ab.py > $OUT/run194.log 2>&1
echo "rc $? $((SECONDS-T0)) s"; grep -v WARNING $OUT/run194.log | tail -8
