# Run 81, H100: the slow dropout GPU tests (Mosaic and Triton) with the folded definition, named (run 80's
# pytest ran out of time after 17 passed).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
timeout 480 python3 -m pytest -q -n 6 tests/test_mosaic.py tests/test_bias_dropout.py -m slow -k "dropout" -rA > $OUT/run81_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; grep -E "^(PASSED|FAILED|ERROR)" $OUT/run81_pytest.log | cut -c1-110; tail -1 $OUT/run81_pytest.log
