# dropout keys loaded at the step's start (EARLY_KEYS) vs after the GEMMs; ptxas spills
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=$PWD
T0=$SECONDS
MOSAIC_GPU_DUMP_PTXAS=1 timeout 560 python3 benchmarks/results/dropout_cost_2026-11-23e_h100/next_drop_cost2.py d128-4k-N,d128-4k-C,d64-4k-N > $OUT/drop_cost2.log 2>&1
echo "rc $? $((SECONDS-T0)) s"
grep -E "^## |spill stores|Used .* registers" $OUT/drop_cost2.log | grep -E "^##|bytes spill stores" | awk '/^##/{print; next} $0 !~ / 0 bytes spill stores/{print "   ", $0}' | cut -c1-150 | head -60
grep -E "^d[0-9]|^  [a-z]" $OUT/drop_cost2.log | tail -20
