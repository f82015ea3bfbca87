# Run 149 (H100): the producer's keep bits (keep_bits.py) on the GPU: exact-bits tests, ptxas's registers, and
# the forward A/B against the consumers' own keep bits at S16k.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
D=benchmarks/results/keep_bits_2026-11-24_h100
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,temperature.gpu --format=csv; } > $OUT/run149_device.txt 2>&1
timeout 200 python3 -m pytest -q -x -n 4 tests/test_mosaic.py -k "dropout_bits or producer_keep_bits" -m "slow or not slow" > $OUT/run149_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -3 $OUT/run149_pytest.log
timeout 150 python3 -m benchmarks.ptxas_report --head-dims 128 --seqlens 4096,16384 --features dropout > $OUT/run149_ptxas.log 2>&1
echo "ptxas rc $? $((SECONDS-T0)) s"; grep -i "fwd" $OUT/run149_ptxas.log | tail -8
timeout $((590-(SECONDS-T0))) python3 $D/bits_ab.py d128-16k-C,d128-16k-N overlap_softmax=True > $OUT/run149_ab.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"
grep -E "^d|^  " $OUT/run149_ab.log
