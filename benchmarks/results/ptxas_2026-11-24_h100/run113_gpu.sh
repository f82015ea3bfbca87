# Run 113 (H100): benchmarks.ptxas_report over the default configs (d64 / d128 / d256, S4k / S16k, causal and not,
# plain / dropout 0.1 / ALiBi): registers, spills and serialized wgmmas of every kernel.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; } > $OUT/run113_device.txt 2>&1
timeout 570 python3 -m benchmarks.ptxas_report --out $OUT/run113_table.md > $OUT/run113.log 2>&1
echo "rc $?"; grep -c "pallas_flash" $OUT/run113_table.md; grep -E "yes|rror" $OUT/run113.log | cut -c1-160
