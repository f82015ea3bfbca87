# Run 72, H100: after 11930f7 (the forward's support check sizes the config of the call's arrays), the Mosaic
# ALiBi forward tests and the config / support-check tests, natively.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
git log --oneline | head -1
timeout -s INT 270 python3 -m pytest -v -rfE -p no:benchmark -p no:cacheprovider -m "slow or not slow" -n 8 \
  tests/test_mosaic.py -k "(alibi and not bwd and not lowers) or check_supported or config" > $OUT/run72_pytest.log 2>&1
echo "pytest rc $?"; grep -E "^(FAILED|ERROR)|passed|failed" $OUT/run72_pytest.log | tail -5
