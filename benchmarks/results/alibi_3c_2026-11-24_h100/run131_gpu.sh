# Run 131 (H100): ALiBi's d128 forward on three consumers with 64-key tiles: ptxas, then alibi_ab.py timed in
# one process.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
R=benchmarks/results/alibi_3c_2026-11-24_h100
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } > $OUT/run131_device.txt 2>&1
for v in "S16kN alibi 3c kv64 st2" "S16kN alibi 3c kv64 st3" "S16kN alibi default"; do
  echo "==== $v"; MOSAIC_GPU_DUMP_PTXAS=1 timeout 100 python3 $R/alibi_ab.py compile "$v" 2>&1 | grep -E "spill stores|Used|C7512|rror|compiled" | grep -v "^ptxas info    : Compiling" | sed 's/ptxas warning : Registers are spilled to local memory in function//'
done > $OUT/run131_ptxas.log 2>&1
echo "ptxas $((SECONDS-T0)) s"; cut -c1-160 $OUT/run131_ptxas.log | grep -v "^ptxas info    : Used" | head -30
timeout $((570-(SECONDS-T0))) python3 $R/alibi_ab.py time > $OUT/run131_time.log 2>&1
echo "time rc $? $((SECONDS-T0)) s"
grep -v -i warn $OUT/run131_time.log | tail -20
