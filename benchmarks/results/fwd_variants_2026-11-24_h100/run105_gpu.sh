# Run 105 (H100): fwd_ab.py — ptxas of the ALiBi three-consumer forward variants and the dropout three-consumer
# forward, then every row timed in one process.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
R=benchmarks/results/fwd_variants_2026-11-24_h100
T0=$SECONDS
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; python3 -c "import jax; print('jax', jax.__version__)"; } > $OUT/run105_device.txt 2>&1; cat $OUT/run105_device.txt
for v in "S16kN alibi 3c fold" "S16kN alibi 3c after" "S16kN alibi 3c fixed1" "S16kN alibi default" "S4kC dropout 3c" "S4kC dropout default"; do
  echo "==== $v"; MOSAIC_GPU_DUMP_PTXAS=1 timeout 100 python3 $R/fwd_ab.py compile "$v" 2>&1 | grep -E "spill stores|Used|rror|compiled" | grep -v "^ptxas info    : Compiling" | sed 's/ptxas warning : Registers are spilled to local memory in function//'
done > $OUT/run105_ptxas.log 2>&1
echo "ptxas $((SECONDS-T0)) s"; cat $OUT/run105_ptxas.log | cut -c1-160
timeout 330 python3 $R/fwd_ab.py time > $OUT/run105_time.log 2>&1
echo "time rc $? $((SECONDS-T0)) s"
grep -v -i warn $OUT/run105_time.log | tail -20
