# Run 116 (H100): the persistent dK/dV kernel (MosaicBackwardConfig.persistent). Its native tests, then
# bwd_bench with the default and the default + persistent=True, cuDNN in the same process.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run116_device.txt 2>&1
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_mosaic.py -m "slow or not slow" -k "persistent and not lowers" > $OUT/run116_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -3 $OUT/run116_pytest.log
V="persistent=True"
timeout 380 python3 benchmarks/bwd_bench.py --cells d64-4k-C,d128-4k-C,d64-4k-N,d128-4k-N --variant $V --only "ours,ours[$V],cudnn" --out $OUT/run116 > $OUT/run116.log 2>&1
echo "bench rc $? $((SECONDS-T0)) s"; grep -v -i warn $OUT/run116.log | tail -16 | cut -c1-150
