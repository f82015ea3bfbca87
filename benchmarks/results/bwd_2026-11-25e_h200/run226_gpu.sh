# Run 226 (H200): main, benchmarks.ptxas_report with the new --variant option (the default configs with some fields
# replaced, in the child process): d128 S4k, default against dkdv_registers=232 (run 190: 36-72 bytes of spills at
# 232 where non-causal, 8-12 at 240).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run226_device.txt 2>&1
timeout 300 python3 -m benchmarks.ptxas_report --head-dims 128 --seqlens 4096 --features plain \
  --variant dkdv_registers=232 --out $OUT/run226_ptxas.md > $OUT/run226.log 2>&1
echo "rc $?"; cat $OUT/run226.log | tail -20
