# Run 74, H100: the paired keep bits (pairs_ab.py), then the dropout GPU tests.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
D=benchmarks/results/dropout_packed_2026-11-24_h100
T0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
MOSAIC_GPU_DUMP_PTXAS=1 timeout 330 python3 $D/pairs_ab.py d128-4k-N,d128-4k-C,d128-16k-N,d128-16k-C > $OUT/run74_raw.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"
grep -E "spill stores in|Compiling entry" $OUT/run74_raw.log | grep -v "0 bytes spill" > $OUT/run74_ptxas.log
grep -v -E "ptxas|spill|Compiling|Function properties|Used [0-9]+ registers|bytes stack|^$|slow_operation|Constant folding|transpose|necessarily a bug|file a bug|took" $OUT/run74_raw.log | grep -v -i warning > $OUT/run74_ab.log
timeout $((560-(SECONDS-T0))) python3 -m pytest -q -n 4 tests/test_mosaic.py tests/test_bias_dropout.py -m slow -k "dropout" > $OUT/run74_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -3 $OUT/run74_pytest.log
grep -E "spill stores in" $OUT/run74_ptxas.log | sed 's/.*function//' | sort | uniq -c
cat $OUT/run74_ab.log | tail -40
