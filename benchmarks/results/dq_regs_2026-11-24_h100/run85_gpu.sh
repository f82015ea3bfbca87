# Run 85: the forward with Q in registers (MosaicConfig.q_in_registers): ptxas and bitwise agreement, then
# mosaic_bench (forward TFLOP/s, cuDNN and tokamax in the same process) at d128 and d64; then the slow Mosaic
# backward tests run 84 did not reach (dropout, fused, dQ rows in registers, three consumers, d256 / d160).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
R=benchmarks/results/dq_regs_2026-11-24_h100
T0=$SECONDS
MOSAIC_GPU_DUMP_PTXAS=1 timeout 120 python3 $R/check_fwd.py > $OUT/ptxas_fwd.log 2>&1
echo "check rc $? $((SECONDS-T0)) s"
grep -E "bitwise|causal=|spill" $OUT/ptxas_fwd.log | grep -v "^ptxas info" | cut -c1-150 | head -30
timeout 230 python3 benchmarks/mosaic_bench.py --bench --tokamax --head-dims 128,64 --variant q_in_registers=True --out $OUT/fwd > $OUT/fwd_bench.log 2>&1
echo "fwd bench rc $? $((SECONDS-T0)) s"; tail -16 $OUT/fwd_bench.log | cut -c1-150
timeout -s INT $((585-(SECONDS-T0))) python3 -m pytest -v -p no:benchmark -p no:cacheprovider -m "slow or not slow" -n 8 tests/test_mosaic.py::test_backward_large tests/test_mosaic.py::test_backward_deterministic_and_zero_on_fully_masked_rows -k "dropout or fused or rows or consumers or 256 or 160 or deterministic" > $OUT/pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; grep -cE " PASSED" $OUT/pytest.log; grep -E " FAILED| ERROR" $OUT/pytest.log | cut -c1-200 | head; tail -1 $OUT/pytest.log
