# Run 106 (H100): dropout_3c.py — the causal d128 forward with dropout on three consumers, S8k-S128k, fwd and fwd+bwd.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
R=benchmarks/results/fwd_variants_2026-11-24_h100
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run106_device.txt 2>&1
timeout 560 python3 $R/dropout_3c.py > $OUT/run106.log 2>&1
echo "rc $?"; grep -v -i warn $OUT/run106.log | tail -14
