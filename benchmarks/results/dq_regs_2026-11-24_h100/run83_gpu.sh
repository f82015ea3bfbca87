# Run 83: the dQ kernel's Q (and dO) held in registers as the score GEMMs' A operand (MosaicBackwardConfig.
# dq_rows_in_registers): ptxas's report and bitwise agreement first, then bwd_bench on the four d128 cells against
# the default, cuDNN and tokamax in one process per cell.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
R=benchmarks/results/dq_regs_2026-11-24_h100
T0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader
MOSAIC_GPU_DUMP_PTXAS=1 timeout 150 python3 $R/check_regs.py N > $OUT/ptxas.log 2>&1
echo "check rc $? $((SECONDS-T0)) s"
grep -E "bitwise|dq_rows|entry function|spill|Error|error" $OUT/ptxas.log | cut -c1-160 | head -60
timeout $((570-(SECONDS-T0))) python3 benchmarks/bwd_bench.py --cells d128-4k-N,d128-16k-N,d128-4k-C,d128-16k-C --variant dq_rows_in_registers=1 --variant dq_rows_in_registers=2 --only "ours,ours[dq_rows_in_registers=1],ours[dq_rows_in_registers=2],cudnn,tokamax" --out $OUT/bench > $OUT/bwd_bench.log 2>&1
echo "bench rc $? $((SECONDS-T0)) s"; grep -v -i warning $OUT/bwd_bench.log | grep -E "^d|ours|cudnn |tokamax" | cut -c1-110 | tail -40
