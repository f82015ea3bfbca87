# run 35: branch h-fixed-magic: the slow backward tests run 34 did not reach (fixed-point cvt words, determinism)
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
S=$PWD/.scratch
cd .wt/magic
export PYTHONPATH=$PWD
T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
timeout -s INT 330 python3 $S/pytest_rest.py $S/passed34.txt -v -p no:benchmark -p no:cacheprovider -m "slow" -n 10 tests/test_mosaic.py -k "backward or fixed" > $OUT/pytest_rest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; grep -E "PASSED|FAILED|ERROR|passed|failed" $OUT/pytest_rest.log | cut -c1-150 | tail -14
