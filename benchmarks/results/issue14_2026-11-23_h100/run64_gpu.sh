# Run 64, H100: feat_ab.py again after the window exception (MosaicConfig.default(window=True): two consumers), then
# the forward window tests of test_mosaic natively.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
timeout 200 python3 benchmarks/results/issue14_2026-11-23_h100/feat_ab.py > $OUT/run64_feat_ab.log 2>&1
echo "rc $? $((SECONDS-T0)) s"; grep -v -i warning $OUT/run64_feat_ab.log | tail -8
timeout -s INT 200 python3 -m pytest -v -p no:benchmark -p no:cacheprovider -m "slow or not slow" -n 8 tests/test_mosaic.py -k "window and not bwd" > $OUT/run64_pytest_window.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; grep -cE " PASSED" $OUT/run64_pytest_window.log; grep -E " FAILED| ERROR" $OUT/run64_pytest_window.log | cut -c1-200 | head; tail -1 $OUT/run64_pytest_window.log
