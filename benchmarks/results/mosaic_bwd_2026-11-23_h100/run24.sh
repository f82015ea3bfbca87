# run 24: backward overlap (P while dP runs) + fused one-step-lag dQ share
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl 2>&1 | tail -1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 200 python3 -m pytest -q -p no:benchmark -p no:cacheprovider -m "slow or not slow" -n 4 tests/test_mosaic.py -k "backward_large or backward_deterministic or test_gradients_through" > $OUT/pytest_bwd.log 2>&1
echo "pytest rc $? ($((SECONDS-T0)) s)"; grep -E "passed|failed|Error" $OUT/pytest_bwd.log | tail -8
for v in "128 N det" "128 N nd" "64 N det" "64 N nd"; do
  MOSAIC_GPU_DUMP_PTXAS=1 timeout 60 python3 .scratch/ptxas.py $v > $OUT/ptxas.log 2>&1
  echo "ptxas $v: $(grep -i 'spill' $OUT/ptxas.log | grep -v '0 bytes spill' | head -3 | tr '\n' ' ')"
done
echo "($((SECONDS-T0)) s)"
timeout $((560-(SECONDS-T0))) python3 benchmarks/bwd_bench.py --cells d128-4k-N,d128-16k-C,d64-4k-N,d64-16k-C --variant deterministic=False --only "ours,ours[deterministic=False],cudnn" --reps 5 --min-ms 30 --out $OUT/bench 2>&1 | grep -v WARNING | tail -30
echo "total $((SECONDS-T0)) s"
