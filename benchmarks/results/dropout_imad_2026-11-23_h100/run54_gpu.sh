# Run 54: main with the d128 dropout forward default changed to no softmax overlap (run 53): bias_bench's dropout
# rows with the peers on the four d128 cells (one process per cell), then the slow dropout tests of test_mosaic.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 300 python3 benchmarks/bias_bench.py --cells 4k-N,4k-C,16k-N,16k-C --impls mosaic,mosaic-dropout,triton-dropout,torch --out $OUT/bench > $OUT/bias_bench.log 2>&1
echo "bench rc $? $((SECONDS-T0)) s"; grep -v -i warning $OUT/bias_bench.log | tail -16 | grep -v " -  "
timeout -s INT $((560-(SECONDS-T0))) python3 -m pytest -v -p no:benchmark -p no:cacheprovider -m slow -n 8 tests/test_mosaic.py -k dropout > $OUT/pytest_dropout.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; grep -cE " PASSED" $OUT/pytest_dropout.log; grep -E " FAILED| ERROR" $OUT/pytest_dropout.log | cut -c1-200 | head; tail -1 $OUT/pytest_dropout.log
