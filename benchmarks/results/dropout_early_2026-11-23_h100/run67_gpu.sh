# Run 67, H100: early keep words in the dropout forward (early_ab.py), then the Mosaic dropout GPU tests.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
timeout 300 python3 benchmarks/results/dropout_early_2026-11-23_h100/early_ab.py d128-4k-N,d128-4k-C,d128-16k-N,d128-16k-C > $OUT/run67_ab.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"
timeout $((520-(SECONDS-T0))) python3 -m pytest -q -x -n 4 tests/test_mosaic.py tests/test_bias_dropout.py -m slow -k "dropout" > $OUT/run67_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -3 $OUT/run67_pytest.log
grep -v -i warning $OUT/run67_ab.log | tail -40
