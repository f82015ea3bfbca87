# Run 108 (H100): the causal d128 dropout default from S = 32k (three consumers) natively (its slow test and the
# config tests), then fwd_ab.py's run-108 rows (non-causal ALiBi without the split loops): ptxas, then timed.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD RUN=108
R=benchmarks/results/fwd_variants_2026-11-24_h100
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run108_device.txt 2>&1
timeout 120 python3 -m pytest -v -p no:cacheprovider -m "slow or not slow" tests/test_mosaic.py -k "S32k or long_dropout or softmax_overlap_off or (dropout and causal and not bwd)" > $OUT/run108_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; grep -cE " PASSED" $OUT/run108_pytest.log; grep -E " FAILED| ERROR" $OUT/run108_pytest.log | cut -c1-200; tail -1 $OUT/run108_pytest.log
for v in "S16kN alibi 3c nosplit" "S16kN alibi nosplit"; do
  echo "==== $v"; MOSAIC_GPU_DUMP_PTXAS=1 timeout 100 python3 $R/fwd_ab.py compile "$v" 2>&1 | grep -E "spill stores|Used|rror|compiled" | grep -v "^ptxas info    : Compiling" | sed 's/ptxas warning : Registers are spilled to local memory in function//'
done > $OUT/run108_ptxas.log 2>&1
echo "ptxas $((SECONDS-T0)) s"; cut -c1-150 $OUT/run108_ptxas.log
timeout $((570-(SECONDS-T0))) python3 $R/fwd_ab.py time > $OUT/run108_time.log 2>&1
echo "time rc $? $((SECONDS-T0)) s"
grep -v -i warn $OUT/run108_time.log | tail -12
