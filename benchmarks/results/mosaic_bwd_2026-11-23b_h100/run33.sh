# run 34: branch h-fixed-magic (cvt words, d64 default fused): slow backward GPU tests + 8-cell table
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl 2>&1 | tail -1
cd .wt/magic
export PYTHONPATH=/tmp/site:$PWD/../../.peers/stubs:$PWD
T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
timeout -s INT 270 python3 -m pytest -v -p no:benchmark -p no:cacheprovider -m "slow" -n 8 tests/test_mosaic.py -k "backward or fixed" > $OUT/pytest_slow.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; grep -E "FAILED|ERROR|passed|failed" $OUT/pytest_slow.log | cut -c1-200 | tail -8
timeout $((585-(SECONDS-T0))) python3 benchmarks/bwd_bench.py --cells d64-4k-N,d64-4k-C,d64-16k-N,d64-16k-C,d128-4k-N,d128-4k-C,d128-16k-N,d128-16k-C --variant deterministic=False --only "ours,ours[deterministic=False],cudnn,tokamax" --reps 3 --min-ms 30 --out $OUT/bench 2>&1 | grep -v WARNING | grep -v "^|" | grep -v "^ *$" | tail -42
echo "total $((SECONDS-T0)) s"
