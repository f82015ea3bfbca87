# Run 133 (H100): ALiBi's bits with and without the stagger; the masks tests natively after position_visible's
# compares came back.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
R=benchmarks/results/masks_direct_2026-11-24_h100
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run133_device.txt 2>&1
timeout 200 python3 $R/alibi_bits.py > $OUT/run133_bits.log 2>&1
echo "bits rc $? $((SECONDS-T0)) s"
timeout $((500-(SECONDS-T0))) python3 -m pytest -q -n 8 tests/test_attention.py tests/test_mosaic.py -k "causal or window or mask or length" -p no:cacheprovider > $OUT/run133_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -2 $OUT/run133_pytest.log
grep -v -i warn $OUT/run133_bits.log
