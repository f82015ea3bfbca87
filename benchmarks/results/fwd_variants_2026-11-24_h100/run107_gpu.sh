# Run 107 (H100): ALiBi's key terms from a K = 16 GEMM (MosaicConfig.alibi_gemm): ptxas, the ALiBi forward tests
# natively (slow included), then fwd_ab.py's run-107 rows timed in one process.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD RUN=107
R=benchmarks/results/fwd_variants_2026-11-24_h100
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run107_device.txt 2>&1
for v in "S16kN alibi 3c gemm" "S16kN alibi gemm" "S16kC alibi gemm" "S16kN alibi default"; do
  echo "==== $v"; MOSAIC_GPU_DUMP_PTXAS=1 timeout 100 python3 $R/fwd_ab.py compile "$v" 2>&1 | grep -E "spill stores|Used|rror|compiled" | grep -v "^ptxas info    : Compiling" | sed 's/ptxas warning : Registers are spilled to local memory in function//'
done > $OUT/run107_ptxas.log 2>&1
echo "ptxas $((SECONDS-T0)) s"; cut -c1-150 $OUT/run107_ptxas.log
timeout 150 python3 -m pytest -q -x tests/test_mosaic.py -k "alibi and not bwd" -m "slow or not slow" -p no:cacheprovider > $OUT/run107_pytest.log 2>&1
echo "pytest rc $? $((SECONDS-T0)) s"; tail -3 $OUT/run107_pytest.log
timeout $((570-(SECONDS-T0))) python3 $R/fwd_ab.py time > $OUT/run107_time.log 2>&1
echo "time rc $? $((SECONDS-T0)) s"
grep -v -i warn $OUT/run107_time.log | tail -16
