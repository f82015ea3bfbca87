# run 28: fixed-point F loaded at the step's start
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl 2>&1 | tail -1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 200 python3 benchmarks/bwd_bench.py --cells d64-4k-N,d64-4k-C,d64-16k-N,d64-16k-C,d128-4k-C --variant fused=True --only "ours[fused=True],cudnn" --reps 5 --min-ms 30 --out $OUT/bench 2>&1 | grep -v WARNING | grep -v "^|" | tail -20
echo "bench ($((SECONDS-T0)) s)"
timeout -s INT 120 python3 -m pytest -v -p no:benchmark -p no:cacheprovider -m "slow or not slow" -n 4 tests/test_mosaic.py -k "fixed and (d64 or alibi or gqa)" > $OUT/pytest_fixed.log 2>&1
echo "pytest rc $?"; grep -E "PASSED|FAILED|ERROR|passed|failed" $OUT/pytest_fixed.log | cut -c1-150 | tail -6
echo "total $((SECONDS-T0)) s"
