# Run 118 (H100): the persistent dK/dV kernel's native tests (the backward ones: run 117's -k "persistent" spent its
# time on the forward's persistent tests).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run118_device.txt 2>&1
timeout 400 python3 -m pytest -v -p no:cacheprovider tests/test_mosaic.py -m "slow or not slow" -k "bwd and persistent" > $OUT/run118_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; grep -E "PASSED|FAILED|ERROR" $OUT/run118_pytest.log | cut -c1-120; tail -2 $OUT/run118_pytest.log
