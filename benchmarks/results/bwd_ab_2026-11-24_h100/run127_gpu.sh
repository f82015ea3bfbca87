# Run 127 (H100): defer_dv with dS^T through shared memory too (dK's A operand: no register operand of a wgmma in
# flight across steps), 3 stages (4 no longer fit at d128), against the default; ptxas's report of each compile.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
D=benchmarks/results/bwd_ab_2026-11-24_h100
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run127_device.txt 2>&1
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_mosaic.py -k "defer and not lowers" > $OUT/run127_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -2 $OUT/run127_pytest.log
MOSAIC_GPU_DUMP_PTXAS=1 timeout 300 python3 $D/cfg_ab.py d128-4k-N,d128-16k-C defer_dv=True,num_stages=3 \
  > $OUT/run127.log 2>&1
echo "rc $? $((SECONDS-T0)) s"
grep -E "C7512|Registers are spilled" $OUT/run127.log | sed 's/for the function.*//' | sort | uniq -c
grep -E "^d|^  [a-z]" $OUT/run127.log
