# Run 121 (H100): native forward / backward tests with the per-row span masks (every mask kind, slow ones
# included, 8 workers), then span_ab.py again on main's final form (the d128 forward keeps the compares).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run121_device.txt 2>&1
timeout -s INT 380 python3 -m pytest -q -rfE -p no:cacheprovider -m "slow or not slow" -n 8 tests/test_mosaic.py -k "(test_forward or test_backward) and not lowers" > $OUT/run121_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; grep -E "passed|failed|error" $OUT/run121_pytest.log | tail -5
timeout 200 python3 benchmarks/results/mask_cost_2026-11-24_h100/span_ab.py d64-4k-C,d128-4k-C,d128-16k-C > $OUT/run121.log 2>&1
echo "rc $? $((SECONDS-T0)) s"; grep -E "^d|^  " $OUT/run121.log
