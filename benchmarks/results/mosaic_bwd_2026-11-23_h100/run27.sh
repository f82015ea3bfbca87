# run 27: fused fixed-point tests (verbose, durations) + d64 timing of fused=True
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl 2>&1 | tail -1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
timeout -s INT 170 python3 -m pytest -v -p no:benchmark -p no:cacheprovider -m "slow or not slow" -n 4 --durations=0 tests/test_mosaic.py -k "fixed" > $OUT/pytest_fixed.log 2>&1
rc=$?; echo "pytest fixed rc $rc ($((SECONDS-T0)) s)"; grep -E "PASSED|FAILED|ERROR|passed|failed|s call" $OUT/pytest_fixed.log | cut -c1-160 | tail -14
timeout $((560-(SECONDS-T0))) python3 benchmarks/bwd_bench.py --cells d64-4k-N,d64-4k-C,d64-16k-N,d64-16k-C,d128-4k-C,d128-16k-N --variant fused=True --only "ours,ours[fused=True],cudnn" --reps 5 --min-ms 30 --out $OUT/bench 2>&1 | grep -v WARNING | grep -v "^|" | tail -30
echo "total $((SECONDS-T0)) s"
