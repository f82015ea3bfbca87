# Run 78, H100: the Mosaic dropout and config tests natively after the paired keep bits and the
# three-consumer dropout default (d128 S>=16k non-causal), slow cases included.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
timeout 540 python3 -m pytest -q -n 4 tests/test_mosaic.py -m "slow or not slow" -k "dropout or config" -rA > $OUT/run78_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; grep -E "^(PASSED|FAILED|ERROR)" $OUT/run78_pytest.log | wc -l; grep -E "^(FAILED|ERROR)" $OUT/run78_pytest.log | head; tail -2 $OUT/run78_pytest.log
