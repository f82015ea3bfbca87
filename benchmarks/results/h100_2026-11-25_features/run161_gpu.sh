# Run 161 (H100): the bias / ALiBi / dropout tests natively on the final code (c52812e, dd58002): Mosaic's
# (slow ones included) and tests/test_bias_dropout.py.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
R=run161
timeout 540 python3 -m pytest -q -p no:cacheprovider -n 8 -m "slow or not slow" tests/test_bias_dropout.py \
  tests/test_mosaic.py -k "test_bias_dropout.py or ((dropout or alibi or bias) and not lowers)" > $OUT/${R}_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; grep -E "passed|failed|FAILED|error" $OUT/${R}_pytest.log | tail -8
