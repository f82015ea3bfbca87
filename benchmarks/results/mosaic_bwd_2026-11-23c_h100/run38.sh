# branch h-dq-writer: the producer converts the fixed-point dQ shares. GPU tests of the fused kernel, ptxas, timing
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
timeout -s INT 170 python3 -m pytest -v -p no:benchmark -p no:cacheprovider -m slow -n 8 tests/test_mosaic.py -k "fused or determin" > $OUT/pytest_fused.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; grep -cE " PASSED" $OUT/pytest_fused.log; grep -E " FAILED| ERROR" $OUT/pytest_fused.log | cut -c1-200 | head; tail -1 $OUT/pytest_fused.log
timeout $((575-(SECONDS-T0))) python3 benchmarks/bwd_bench.py --cells d64-4k-N,d64-4k-C,d64-16k-N,d64-16k-C,d128-4k-N,d128-4k-C,d128-16k-N,d128-16k-C --variant fused=True --variant deterministic=False --only "ours,ours[fused=True],ours[deterministic=False],cudnn" --reps 3 --min-ms 30 --out $OUT/bench > $OUT/bench.log 2>&1
echo "bench rc $? $((SECONDS-T0)) s"; grep -E "^d|TFLOP|failed" $OUT/bench.log | tail -45
