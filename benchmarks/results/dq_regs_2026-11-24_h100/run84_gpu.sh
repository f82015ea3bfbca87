# Run 84: with the new d128 default (dq_rows_in_registers=1): every Mosaic backward test natively (slow included),
# then bwd_bench with dropout 0.1: the d128 default against dq_rows_in_registers=0, and the d64 dropout default
# (two kernels) against dq_rows_in_registers=1, one process per cell.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
T0=$SECONDS
timeout -s INT 330 python3 -m pytest -v -p no:benchmark -p no:cacheprovider -m "slow or not slow" -n 8 tests/test_mosaic.py -k "backward or bwd or deterministic or gradients" > $OUT/pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; grep -cE " PASSED" $OUT/pytest.log; grep -E " FAILED| ERROR" $OUT/pytest.log | cut -c1-200 | head; tail -1 $OUT/pytest.log
timeout $((585-(SECONDS-T0))) python3 benchmarks/bwd_bench.py --cells d128-4k-N,d128-16k-N --dropout 0.1 --variant dq_rows_in_registers=0 --only "ours dropout,ours[dq_rows_in_registers=0]" --out $OUT/bench128 > $OUT/bwd_bench128.log 2>&1
echo "bench128 rc $? $((SECONDS-T0)) s"
timeout $((590-(SECONDS-T0))) python3 benchmarks/bwd_bench.py --cells d64-4k-N --dropout 0.1 --variant dq_rows_in_registers=1 --only "ours dropout,ours[dq_rows_in_registers=1]" --out $OUT/bench64 > $OUT/bwd_bench64.log 2>&1
echo "bench64 rc $? $((SECONDS-T0)) s"
grep -v -i warning $OUT/bwd_bench128.log $OUT/bwd_bench64.log | grep -E "ours" | cut -c1-140 | tail -12
