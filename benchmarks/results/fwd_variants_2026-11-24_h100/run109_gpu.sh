# Run 109 (H100): alibi_split_ab.py — the non-causal ALiBi forward without its split loops, fwd and fwd+bwd.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
R=benchmarks/results/fwd_variants_2026-11-24_h100
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run109_device.txt 2>&1
timeout 500 python3 $R/alibi_split_ab.py > $OUT/run109.log 2>&1
echo "rc $?"; grep -v -i warn $OUT/run109.log | tail -8
