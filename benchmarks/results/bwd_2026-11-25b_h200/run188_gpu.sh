# Run 188 (H200): serial_scores (the dK/dV kernel with one f32 score tile live per consumer, which leaves room for
# 128-row query steps at d128) natively: its tests, then against the d128 default of the same process (cfg_ab.py),
# with ptxas's spill report of every kernel compiled.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
AB=benchmarks/results/bwd_ab_2026-11-24_h100/cfg_ab.py
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run188_device.txt 2>&1
T="tests/test_mosaic.py::test_backward"
timeout 200 python3 -m pytest -q -p no:cacheprovider -n 4 -m "slow or not slow" \
  "$T[bwd serial scores d128 128-row steps gqa causal lengths]" "${T}_large[bwd serial scores S2k d128 gqa]" \
  "${T}_large[bwd serial scores causal d128 segments ragged]" "${T}_large[bwd serial scores d64 fp16 dense mask]" \
  > $OUT/run188_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -3 $OUT/run188_pytest.log
MOSAIC_GPU_DUMP_PTXAS=1 timeout $((570-(SECONDS-T0))) python3 $AB d128-4k-N,d128-16k-N,d128-16k-C \
  serial_scores=True,row_ring=True,prefetch_rows=False,block_q_dkv=128 > $OUT/run188.log 2> $OUT/run188_ptxas.log
echo "ab rc $? $((SECONDS-T0)) s"; grep -E "^d|^  " $OUT/run188.log
grep -E "Compiling entry|spill stores" $OUT/run188_ptxas.log | grep -B1 "spill stores" | grep -v "^--" | cut -c1-140 | uniq -c | head -30
