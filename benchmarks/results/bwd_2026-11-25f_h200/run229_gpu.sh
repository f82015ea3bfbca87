# Run 229 (H200): scores_ahead (the dK/dV kernel issues the next step's S^T behind this step's dK; rows through the
# ring). Natively its two tests; ptxas of the d128 S4k kernels; then A/B against the default and against the ring alone
# (same rows source) on the d128 cells.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run229_device.txt 2>&1
RING="row_ring=True,prefetch_rows=False"
timeout 120 python3 -m pytest -q -p no:cacheprovider -n 2 "tests/test_mosaic.py::test_backward[bwd scores ahead stagger gqa causal lengths]" \
  "tests/test_mosaic.py::test_backward[bwd scores ahead soft-cap d128 ragged]" > $OUT/run229_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -3 $OUT/run229_pytest.log
timeout 200 python3 -m benchmarks.ptxas_report --head-dims 128 --seqlens 4096 --features plain \
  --variant $RING --variant $RING,scores_ahead=True --out $OUT/run229_ptxas.md > $OUT/run229_ptxas.log 2>&1
echo "ptxas rc $? $((SECONDS-T0)) s"; grep -i "dkdv" $OUT/run229_ptxas.md
timeout $((570-(SECONDS-T0))) python3 benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py d128-4k-N,d128-16k-N,d128-16k-C \
  $RING $RING,scores_ahead=True > $OUT/run229_ab.log 2>&1
echo "ab rc $? $((SECONDS-T0)) s"
grep -v "^ *$" $OUT/run229_ab.log | tail -12
