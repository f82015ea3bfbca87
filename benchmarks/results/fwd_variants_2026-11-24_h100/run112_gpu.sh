# Run 112 (H100): ptxas's full report (warnings included) of the three-consumer d128 forward, no bias against
# ALiBi (fwd_ab.py compile): does ptxas serialize the wgmmas with ALiBi?
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
R=benchmarks/results/fwd_variants_2026-11-24_h100
for v in "S16kN plain default" "S16kN alibi 3c fold" "S16kN alibi default" "S4kC dropout 3c"; do
  echo "==== $v"; MOSAIC_GPU_DUMP_PTXAS=1 timeout 100 python3 $R/fwd_ab.py compile "$v" 2>&1 | grep -iE "ptxas|spill|serializ|compiled|rror" | grep -v "Compiling entry\|Function properties"
done > $OUT/run112_ptxas.log 2>&1
cut -c1-260 $OUT/run112_ptxas.log
