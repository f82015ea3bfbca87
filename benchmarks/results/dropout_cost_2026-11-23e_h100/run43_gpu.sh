# main c554005: dropout slow GPU tests (DropoutTiles.pop refactor), dropout cost decomposition
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
timeout -s INT 200 python3 -m pytest -v -p no:benchmark -p no:cacheprovider -m slow -n 8 tests/test_mosaic.py -k "dropout" > $OUT/pytest_dropout.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; grep -cE " PASSED" $OUT/pytest_dropout.log; grep -E " FAILED| ERROR" $OUT/pytest_dropout.log | cut -c1-200 | head; tail -1 $OUT/pytest_dropout.log
timeout $((580-(SECONDS-T0))) python3 .scratch/drop_cost.py d128-4k-N,d128-4k-C,d64-4k-N > $OUT/drop_cost.log 2>&1
echo "cost rc $? $((SECONDS-T0)) s"; grep -v -i warning $OUT/drop_cost.log | tail -24
