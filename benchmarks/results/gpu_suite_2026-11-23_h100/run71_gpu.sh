# Run 71, H100: the 58 tests of tests/test_mosaic.py that runs 68 and 70 did not reach (run71_ids.txt: collection
# order's tail), natively on the GPU.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
timeout -s INT 575 python3 -c "
import sys, pytest
ids = [l.strip() for l in open('benchmarks/results/gpu_suite_2026-11-23_h100/run71_ids.txt') if l.strip()]
sys.exit(pytest.main(['-v', '-rfE', '-p', 'no:benchmark', '-p', 'no:cacheprovider', '-m', 'slow or not slow',
                      '-n', '8', '--durations=10', *ids]))" > $OUT/run71_pytest_mosaic.log 2>&1
echo "pytest rc $?"; grep -E "^(FAILED|ERROR)|passed|failed" $OUT/run71_pytest_mosaic.log | tail -5
