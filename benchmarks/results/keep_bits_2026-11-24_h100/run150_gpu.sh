# Run 150 (H100): run 149's failed test case fixed (its config did not fit shared memory), then the keep-bits
# forward A/B at S4k and again at S16k C.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
D=benchmarks/results/keep_bits_2026-11-24_h100
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,temperature.gpu --format=csv; } > $OUT/run150_device.txt 2>&1
timeout 120 python3 -m pytest -q -n 4 tests/test_mosaic.py -k "producer_keep_bits" -m "slow or not slow" > $OUT/run150_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -2 $OUT/run150_pytest.log
timeout $((590-(SECONDS-T0))) python3 $D/bits_ab.py d128-4k-N,d128-4k-C,d128-16k-C > $OUT/run150_ab.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"
grep -E "^d|^  " $OUT/run150_ab.log
