# Run 75, H100: the paired keep bits with the Triton literal fixed: timing (pairs_ab.py --configs),
# then the Triton dropout / bias GPU tests that run 74 failed and the new lowering / threshold tests.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
D=benchmarks/results/dropout_packed_2026-11-24_h100
T0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 300 python3 $D/pairs_ab.py d128-4k-N,d128-4k-C,d128-16k-N,d128-16k-C --configs > $OUT/run75_raw.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"
grep -v -E "^$|slow_operation|Constant folding|transpose|necessarily a bug|file a bug|took" $OUT/run75_raw.log | grep -v -i warning > $OUT/run75_ab.log
timeout $((570-(SECONDS-T0))) python3 -m pytest -q -n 4 tests/test_bias_dropout.py -m "slow or not slow" -k "large or lower or threshold or bits" > $OUT/run75_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -3 $OUT/run75_pytest.log
tail -52 $OUT/run75_ab.log
