# Run 132 (H100): position_visible's three forms in the causal d128 forward; ALiBi at S4k N without the stagger
# and in one loop. Then the masked forward tests natively.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
R=benchmarks/results/masks_direct_2026-11-24_h100
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run132_device.txt 2>&1
timeout 420 python3 $R/ab132.py all > $OUT/run132_time.log 2>&1
echo "time rc $? $((SECONDS-T0)) s"
timeout $((580-(SECONDS-T0))) python3 -m pytest -q -n 8 tests/test_attention.py tests/test_mosaic.py -k "causal or window or mask or length" -p no:cacheprovider > $OUT/run132_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -3 $OUT/run132_pytest.log
grep -v -i warn $OUT/run132_time.log | tail -32
