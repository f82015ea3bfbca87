# Run 62, H100: the d128 non-causal S16k forward with ALiBi back on two consumers (MosaicConfig.default(alibi=True)):
# bias_bench's mosaic and mosaic alibi rows at S16k N, then the slow ALiBi GPU tests of test_mosaic.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
timeout 150 python3 benchmarks/bias_bench.py --cells 16k-N --impls mosaic,mosaic-alibi --no-torch --reps 7 --sample-ms 30 --out $OUT/s16kN > $OUT/run62_bench.log 2>&1
echo "bench rc $? $((SECONDS-T0)) s"; grep -v -i warning $OUT/run62_bench.log | tail -8
timeout -s INT $((400-(SECONDS-T0))) python3 -m pytest -v -p no:benchmark -p no:cacheprovider -m "slow or not slow" -n 8 tests/test_mosaic.py -k "alibi and not bwd" > $OUT/run62_pytest_alibi.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; grep -cE " PASSED" $OUT/run62_pytest_alibi.log; grep -E " FAILED| ERROR" $OUT/run62_pytest_alibi.log | cut -c1-200 | head; tail -1 $OUT/run62_pytest_alibi.log
