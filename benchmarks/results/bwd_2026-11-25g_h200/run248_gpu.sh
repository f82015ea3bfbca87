# Run 248 (H200, final main): natively the non-d128 backward cases of the rings, dropout, d64 and d256 (dropout's key ring
# beside the row ring), after this session's changes to the ring shapes.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run248_device.txt 2>&1
timeout 200 python3 -m pytest -q -p no:cacheprovider -n 8 -k "test_backward and not d128 and not large and not lowers and (row or ring or dropout or d256 or d64 or default)" tests/test_mosaic.py > $OUT/run248_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -3 $OUT/run248_pytest.log
