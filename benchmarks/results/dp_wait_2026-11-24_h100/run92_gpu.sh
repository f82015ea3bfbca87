# Next session's first call on this branch: the dK/dV chain with the dP^T wait after dV's issue, against the order
# on main (dp_wait_after_dv=False), in one process per cell; then the slow backward tests.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
T0=$SECONDS
timeout 240 python3 benchmarks/bwd_bench.py --cells d128-4k-N,d128-16k-N,d128-4k-C,d128-16k-C,d64-4k-N,d64-4k-C --variant dp_wait_after_dv=False --only "ours,ours[dp_wait_after_dv=False],cudnn" --out $OUT/bench > $OUT/bwd_bench.log 2>&1
echo "bench rc $? $((SECONDS-T0)) s"; grep -E "^d|ours|cudnn " $OUT/bwd_bench.log | grep -v -i warn | cut -c1-120 | tail -24
timeout -s INT $((590-(SECONDS-T0))) python3 -m pytest -v -p no:benchmark -p no:cacheprovider -m "slow or not slow" -n 8 tests/test_mosaic.py::test_backward_large tests/test_mosaic.py::test_backward tests/test_mosaic.py::test_backward_deterministic_and_zero_on_fully_masked_rows tests/test_mosaic.py::test_fused_fixed_point_backward_is_deterministic > $OUT/pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; grep -cE " PASSED" $OUT/pytest.log; grep -E " FAILED| ERROR" $OUT/pytest.log | cut -c1-200 | head; tail -1 $OUT/pytest.log
