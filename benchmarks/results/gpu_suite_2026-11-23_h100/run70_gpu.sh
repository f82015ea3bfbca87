# Run 70, H100: tests/test_mosaic.py natively on the GPU again, slow cases included, 14 workers and -v (run 68's
# 8 workers reached 144 of its 201 tests in 560 s, all passed, without names).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
timeout -s INT 575 python3 -m pytest -v -rfE -p no:benchmark -p no:cacheprovider -m "slow or not slow" -n 14 \
  --durations=10 tests/test_mosaic.py > $OUT/run70_pytest_mosaic.log 2>&1
echo "pytest rc $?"; grep -E "^(FAILED|ERROR)|passed|failed" $OUT/run70_pytest_mosaic.log | tail -5
