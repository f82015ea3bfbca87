# Run 130 (H100): after masks.item_bounds / forward.persistent_ctas (the tile tables and the persistent schedules
# of the forward and the dK/dV kernel, same values; kernel modules textually unchanged): the persistent Mosaic
# tests and the schedule tests natively, 8 workers.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run130_device.txt 2>&1
timeout -s INT 500 python3 -m pytest -v -rfE -p no:cacheprovider -m "slow or not slow" -n 8 tests/test_schedule.py tests/test_mosaic.py -k "schedule or steps or (persistent and not lowers)" > $OUT/run130_pytest.log 2>&1
echo "rc $? $((SECONDS-T0)) s"; grep -c PASSED $OUT/run130_pytest.log; grep -E "FAILED|ERROR " $OUT/run130_pytest.log | head -5; grep -E "passed|failed" $OUT/run130_pytest.log | tail -1
