# run 26: fused fixed-point (deterministic) dQ: tests + timing beside the f32 fused, the default and cuDNN
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl 2>&1 | tail -1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 130 python3 -m pytest -q -p no:benchmark -p no:cacheprovider -m "slow or not slow" -n 4 tests/test_mosaic.py -k "fixed" > $OUT/pytest_fixed.log 2>&1
rc=$?; echo "pytest fixed rc $rc ($((SECONDS-T0)) s)"; grep -E "passed|failed|Error|assert" $OUT/pytest_fixed.log | tail -8
ONLY="ours,ours[fused=True],ours[deterministic=False],cudnn"
[ $rc = 0 ] || ONLY="ours,ours[deterministic=False],cudnn"
timeout $((575-(SECONDS-T0))) python3 benchmarks/bwd_bench.py --cells d64-4k-N,d64-4k-C,d64-16k-N,d64-16k-C,d128-4k-N,d128-4k-C,d128-16k-N,d128-16k-C --variant fused=True --variant deterministic=False --only "$ONLY" --reps 5 --min-ms 30 --out $OUT/bench 2>&1 | grep -v WARNING | tail -40
echo "total $((SECONDS-T0)) s"
