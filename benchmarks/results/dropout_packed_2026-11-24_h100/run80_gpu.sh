# Run 80, H100: the folded keep-bit word (dropout.fold) against the unfolded one (pairs_ab.py --fold),
# then the slow dropout GPU tests (Mosaic and Triton) with the folded definition.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
D=benchmarks/results/dropout_packed_2026-11-24_h100
T0=$SECONDS
timeout 260 python3 $D/pairs_ab.py d128-4k-N,d128-4k-C,d128-16k-N,d128-16k-C --fold > $OUT/run80_raw.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"
grep -v -E "^$|slow_operation|Constant folding|transpose|necessarily a bug|file a bug|took" $OUT/run80_raw.log | grep -v -i warning > $OUT/run80_ab.log
timeout $((570-(SECONDS-T0))) python3 -m pytest -q -n 4 tests/test_mosaic.py tests/test_bias_dropout.py -m slow -k "dropout" > $OUT/run80_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -2 $OUT/run80_pytest.log
tail -30 $OUT/run80_ab.log
