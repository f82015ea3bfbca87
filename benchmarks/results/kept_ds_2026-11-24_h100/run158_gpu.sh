# Run 158 (H100): the new dropout + soft-cap backward test natively, then the S16k C dropout backward without the
# stagger against the default (the stagger was chosen with the two-select form, runs 136-137).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,temperature.gpu --format=csv; } > $OUT/run158_device.txt 2>&1
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_mosaic.py -k "dropout and soft-cap and d64" > $OUT/run158_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -1 $OUT/run158_pytest.log
timeout $((170-(SECONDS-T0))) python3 benchmarks/results/dropout_bwd_2026-11-24_h100/drop_ab.py d128-16k-C stagger_consumers=False > $OUT/run158_ab.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"
grep -E "^d|^  " $OUT/run158_ab.log
