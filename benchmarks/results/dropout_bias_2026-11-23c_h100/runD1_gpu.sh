# issue 14: branch h5-mosaic-bias (on h4-mosaic-dropout): Mosaic dropout + bias GPU tests, then bias_bench S4k
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
cd .wt/h5 && export PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; git log -1 --format=%h 2>/dev/null; } > $OUT/device.txt 2>&1; cat $OUT/device.txt
timeout -s INT 290 python3 -m pytest -v -p no:benchmark -p no:cacheprovider -m slow -n 8 tests/test_mosaic.py -k "bias or dropout" > $OUT/pytest_slow.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; grep -cE "PASSED" $OUT/pytest_slow.log; grep -E "FAILED|ERROR" $OUT/pytest_slow.log | cut -c1-250 | head -12; tail -1 $OUT/pytest_slow.log
timeout $((585-(SECONDS-T0))) python3 benchmarks/bias_bench.py --cells 4k-N,4k-C --impls mosaic,mosaic-dropout,triton-dropout,torch,mosaic-bias,triton-bias,cudnn-bias,cudnn --reps 3 --out $OUT/bench > $OUT/bench.log 2>&1
echo "bench rc $? $((SECONDS-T0)) s"; grep -v WARNING $OUT/bench.log | grep -E "vs|ratio|/|TF/s|failed" | tail -40
