# Run 58: three consumers in the backward (MosaicBackwardConfig.consumers / dq_consumers): the backward tests that
# use them, natively; then bwd_bench on the four d128 cells with the dQ kernel's three consumers (64- and 128-key
# steps) against the default, cuDNN and tokamax in one process per cell.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
T0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout -s INT 200 python3 -m pytest -v -p no:benchmark -p no:cacheprovider -m "slow or not slow" -n 8 tests/test_mosaic.py -k "bwd and consumers" > $OUT/pytest_3cons.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; grep -cE " PASSED" $OUT/pytest_3cons.log; grep -E " FAILED| ERROR" $OUT/pytest_3cons.log | cut -c1-200 | head; tail -1 $OUT/pytest_3cons.log
timeout $((580-(SECONDS-T0))) python3 benchmarks/bwd_bench.py --cells d128-4k-N,d128-4k-C,d128-16k-N,d128-16k-C --variant dq_consumers=3 --variant dq_consumers=3,block_kv_dq=128 --only "ours,ours[dq_consumers=3],ours[dq_consumers=3,block_kv_dq=128],cudnn,tokamax" --out $OUT/bench > $OUT/bwd_bench.log 2>&1
echo "bench rc $? $((SECONDS-T0)) s"; grep -v -i warning $OUT/bwd_bench.log | grep -E "^d|ours|cudnn |tokamax" | cut -c1-100
