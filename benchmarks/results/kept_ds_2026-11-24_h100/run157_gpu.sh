# Run 157 (H100): ptxas's registers and spills of the d128 dropout kernels on main after the kept-dS change.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,temperature.gpu --format=csv; } > $OUT/run157_device.txt 2>&1
timeout 150 python3 -m benchmarks.ptxas_report --head-dims 128 --seqlens 4096,16384 --features dropout > $OUT/run157_ptxas.log 2>&1
echo "ptxas rc $? $((SECONDS-T0)) s"; grep "^|" $OUT/run157_ptxas.log
