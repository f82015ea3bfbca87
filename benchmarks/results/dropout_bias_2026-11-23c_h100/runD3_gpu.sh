# main after the h4 merge: Mosaic dropout slow GPU tests; forward dropout variants; d64 dropout; Triton bias at S16k
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader; git log -1 --format=%h 2>/dev/null
timeout -s INT 200 python3 -m pytest -v -p no:benchmark -p no:cacheprovider -m slow -n 8 tests/test_mosaic.py -k "dropout" > $OUT/pytest_dropout.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; grep -cE "PASSED" $OUT/pytest_dropout.log; grep -E "FAILED|ERROR" $OUT/pytest_dropout.log | cut -c1-200 | head; tail -1 $OUT/pytest_dropout.log
timeout 120 python3 .scratch/fwd_dropout.py d128-4k-N,d128-4k-C > $OUT/fwd_dropout.log 2>&1; grep -v WARNING $OUT/fwd_dropout.log | tail -12
echo "fwd $((SECONDS-T0)) s"
timeout 110 python3 benchmarks/bwd_bench.py --cells d64-4k-N,d64-4k-C --dropout 0.1 --only "ours,ours dropout,triton dropout" --reps 3 --min-ms 30 --out $OUT/d64 > $OUT/d64.log 2>&1; grep -E "^d|TFLOP|failed" $OUT/d64.log | tail -8
echo "d64 $((SECONDS-T0)) s"
timeout $((590-(SECONDS-T0))) python3 benchmarks/bias_bench.py --cells 16k-C,16k-N --impls triton-bias,cudnn-bias --no-torch --reps 3 --out $OUT/bias16k > $OUT/bias16k.log 2>&1
echo "bias rc $?"; grep -v WARNING $OUT/bias16k.log | grep -E "vs|TF/s|failed|cudnn /" | tail -8
echo "total $((SECONDS-T0)) s"
