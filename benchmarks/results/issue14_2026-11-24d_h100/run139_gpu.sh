# Run 139 (H100): the 29 Mosaic dropout tests natively (run 138's pytest ran out of its 130 s), then the S16k cells
# of issue 14's table a second time.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run139_device.txt 2>&1
timeout 330 python3 -m pytest -q -p no:cacheprovider -n 8 -m "slow or not slow" tests/test_mosaic.py -k "dropout and not lowers" > $OUT/run139_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -2 $OUT/run139_pytest.log
timeout $((590-(SECONDS-T0))) python3 benchmarks/bias_bench.py --cells 16k-N,16k-C --reps 5 --sample-ms 30 --out $OUT/run139_s16k > $OUT/run139_s16k.log 2>&1
echo "run139 s16k rc $? $((SECONDS-T0)) s"
grep -v -i warning $OUT/run139_s16k.log | tail -22
