# main after the dropout merge: the slow GPU tests without dropout or bias (regression check of the no-dropout kernels)
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
timeout -s INT 530 python3 -m pytest -v -p no:benchmark -p no:cacheprovider -m slow -n 8 tests/test_mosaic.py -k "not dropout and not bias" > $OUT/pytest_slow.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; grep -cE " PASSED" $OUT/pytest_slow.log; grep -E " FAILED| ERROR" $OUT/pytest_slow.log | cut -c1-200 | head; tail -1 $OUT/pytest_slow.log
