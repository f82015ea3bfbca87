# Run 232 (H200): a third Q / dO stage for the dK/dV kernel alone (dq_stages=2 keeps the dQ kernel's 128-key steps in
# shared memory), on the default and under scores_ahead (lse2 from the ring: delta prefetched, or from the ring too).
# Natively the scores_ahead test with three stages; A/B against the default on the d128 non-causal cells.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run232_device.txt 2>&1
timeout 100 python3 -m pytest -q -p no:cacheprovider "tests/test_mosaic.py::test_backward[bwd scores ahead stagger gqa causal lengths]" > $OUT/run232_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -1 $OUT/run232_pytest.log
S3="num_stages=3,dq_stages=2"
timeout $((575-(SECONDS-T0))) python3 benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py d128-4k-N,d128-16k-N \
  $S3 $S3,row_ring=True,scores_ahead=True $S3,row_ring=True,prefetch_rows=False,scores_ahead=True > $OUT/run232_ab.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"
grep -v "^ *$" $OUT/run232_ab.log | tail -12
