# Run 88: the dK/dV kernel with each step's (lse2, delta) rows copied by the producer into a ring with Q / dO
# (instead of two global loads at the step's start): kernel_split.py again (no dropout, four d128 cells; dropout at
# S4k N / S16k N), then bwd_bench at d64 (the fused default uses the same kernel), then slow backward tests.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
R=benchmarks/results/bwd_split_2026-11-24_h100
T0=$SECONDS
timeout 150 python3 $R/kernel_split.py > $OUT/split.log 2>&1
echo "split rc $? $((SECONDS-T0)) s"; tail -9 $OUT/split.log
timeout 120 python3 $R/kernel_split.py --dropout 0.1 --cells 4k-N,16k-N > $OUT/split_dropout.log 2>&1
echo "split dropout rc $? $((SECONDS-T0)) s"; tail -5 $OUT/split_dropout.log
timeout 120 python3 benchmarks/bwd_bench.py --cells d64-4k-N,d64-4k-C,d64-16k-C --only "ours,cudnn" --out $OUT/bench64 > $OUT/bwd_bench64.log 2>&1
echo "bench64 rc $? $((SECONDS-T0)) s"; grep -E "^d|ours|cudnn " $OUT/bwd_bench64.log | grep -v -i warn | cut -c1-120 | tail -9
timeout -s INT $((590-(SECONDS-T0))) python3 -m pytest -v -p no:benchmark -p no:cacheprovider -m "slow or not slow" -n 8 tests/test_mosaic.py::test_backward_large tests/test_mosaic.py::test_backward_deterministic_and_zero_on_fully_masked_rows -k "dropout or fused or d128 or 256 or deterministic or segments or dense" > $OUT/pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; grep -cE " PASSED" $OUT/pytest.log; grep -E " FAILED| ERROR" $OUT/pytest.log | cut -c1-200 | head; tail -1 $OUT/pytest.log
