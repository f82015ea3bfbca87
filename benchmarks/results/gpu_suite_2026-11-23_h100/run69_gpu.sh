# Run 69, H100: the whole test suite natively on the GPU, part 2 of 2 (every file but tests/test_mosaic.py), slow cases included.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
timeout -s INT 560 python3 -m pytest -v -rfE -p no:benchmark -p no:cacheprovider -m "slow or not slow" -n 12 \
  --durations=15 tests --ignore=tests/test_mosaic.py > $OUT/run69_pytest_rest.log 2>&1
echo "pytest rc $?"; grep -E "^(FAILED|ERROR)|passed|failed" $OUT/run69_pytest_rest.log | tail -5
