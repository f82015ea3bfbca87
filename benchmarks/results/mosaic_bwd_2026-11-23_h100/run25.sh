# run 25: fused one-step-lag fix; overlap timing
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl 2>&1 | tail -1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 150 python3 -m pytest -q -p no:benchmark -p no:cacheprovider -m "slow or not slow" -n 4 tests/test_mosaic.py -k "fused" > $OUT/pytest_fused.log 2>&1
rc=$?; echo "pytest fused rc $rc ($((SECONDS-T0)) s)"; grep -E "passed|failed|Error" $OUT/pytest_fused.log | tail -8
ONLY="ours,ours[deterministic=False],cudnn"
[ $rc = 0 ] || ONLY="ours,cudnn"
timeout $((570-(SECONDS-T0))) python3 benchmarks/bwd_bench.py --cells d128-4k-N,d128-16k-C,d64-4k-N,d64-16k-C --variant deterministic=False --only "$ONLY" --reps 5 --min-ms 30 --out $OUT/bench 2>&1 | grep -v WARNING | tail -30
echo "total $((SECONDS-T0)) s"
