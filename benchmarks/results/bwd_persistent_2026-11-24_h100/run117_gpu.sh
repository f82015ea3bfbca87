# Run 117 (H100): the persistent dK/dV kernel with two K / V sets (the next item's K / V loaded during this one).
# Its native tests, then bwd_bench, the default against default + persistent=True, cuDNN in the same process.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run117_device.txt 2>&1
timeout 230 python3 -m pytest -v -p no:cacheprovider tests/test_mosaic.py -m "slow or not slow" -k "persistent and not lowers" > $OUT/run117_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; grep -c PASSED $OUT/run117_pytest.log; grep -E "FAILED|Error" $OUT/run117_pytest.log | head -5
V="persistent=True"
timeout 350 python3 benchmarks/bwd_bench.py --cells d64-4k-C,d128-4k-C,d64-4k-N,d128-4k-N,d64-16k-C,d128-16k-C --variant $V --only "ours,ours[$V],cudnn" --out $OUT/run117 > $OUT/run117.log 2>&1
echo "bench rc $? $((SECONDS-T0)) s"; grep -E "^d|^  (ours|cudnn)" $OUT/run117.log | cut -c1-110
