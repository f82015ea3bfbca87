# Run 144 (H100): the 21 Mosaic ALiBi tests natively with ALiBi's new backward default (d128 non-causal: no
# stagger), then issue 14's table (bias_bench.py, as in runs 134 and 138) at S4k.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; python3 -c "import jax, torch; print('jax', jax.__version__, 'torch', torch.__version__)"; } > $OUT/run144_device.txt 2>&1; cat $OUT/run144_device.txt
timeout 300 python3 -m pytest -q -p no:cacheprovider -n 8 -m "slow or not slow" tests/test_mosaic.py -k "alibi and not lowers" > $OUT/run144_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -2 $OUT/run144_pytest.log
timeout $((590-(SECONDS-T0))) python3 benchmarks/bias_bench.py --cells 4k-N,4k-C --reps 5 --sample-ms 30 --out $OUT/run144_s4k > $OUT/run144_s4k.log 2>&1
echo "run144 s4k rc $? $((SECONDS-T0)) s"
grep -v -i warning $OUT/run144_s4k.log | tail -22
