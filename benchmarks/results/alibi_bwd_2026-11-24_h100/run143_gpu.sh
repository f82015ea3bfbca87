# Run 143 (H100): ALiBi's d128 backward without the staggered consumers (run 142: +4% at S4k N, +1.5% at S16k N), in
# the causal cells, which run 142 did not time, and at S4k N again.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run143_device.txt 2>&1
AB_FEATURE=alibi timeout 500 python3 benchmarks/results/dropout_bwd_2026-11-24_h100/drop_ab.py \
  d128-4k-C,d128-16k-C,d128-4k-N stagger_consumers=False > $OUT/run143.log 2>&1
echo "rc $? $((SECONDS-T0)) s"
grep -E "^d|^  [a-z]|Error|error" $OUT/run143.log | head -40
