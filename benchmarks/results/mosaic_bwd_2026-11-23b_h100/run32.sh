# run 33: branch h-fixed-magic: the rest of the backward GPU tests; d64 default vs fused=True vs cuDNN; to_fixed diagnostics
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl 2>&1 | tail -1
S=$PWD/.scratch
cd .wt/magic
export PYTHONPATH=/tmp/site:$PWD/../../.peers/stubs:$PWD
T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
timeout -s INT 300 python3 $S/pytest_rest.py $S/passed32.txt -v -p no:benchmark -p no:cacheprovider -m "slow or not slow" -n 8 tests/test_mosaic.py -k "backward or fixed" > $OUT/pytest_rest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; grep -E "FAILED|ERROR|passed|failed" $OUT/pytest_rest.log | cut -c1-200 | tail -8
B="--reps 3 --min-ms 30"
timeout $((560-(SECONDS-T0))) python3 benchmarks/bwd_bench.py --cells d64-4k-N,d64-4k-C,d64-16k-N,d64-16k-C --variant fused=True --only "ours,ours[fused=True],cudnn" $B --out $OUT/bench 2>&1 | grep -v WARNING | grep -v "^|" | tail -16
for m in cvt bits; do timeout $((580-(SECONDS-T0))) python3 $S/patched_bench.py $m --cells d64-4k-N,d64-4k-C --variant fused=True --only "ours[fused=True]" $B --out $OUT/bench_$m 2>&1 | grep -v WARNING | grep -v "^|" | grep -v "^ *$" | tail -5; done
echo "total $((SECONDS-T0)) s"
