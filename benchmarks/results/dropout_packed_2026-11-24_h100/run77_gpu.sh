# Run 77, H100: with the paired keep bits, three consumers in the dropout forward (where the default has two)
# and in the dQ kernel (pairs_ab.py --more).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
D=benchmarks/results/dropout_packed_2026-11-24_h100
T0=$SECONDS
timeout 500 python3 $D/pairs_ab.py d128-4k-N,d128-4k-C,d128-16k-C,d128-16k-N --more > $OUT/run77_raw.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"
grep -v -E "^$|slow_operation|Constant folding|transpose|necessarily a bug|file a bug|took" $OUT/run77_raw.log | grep -v -i warning > $OUT/run77_ab.log
tail -48 $OUT/run77_ab.log
