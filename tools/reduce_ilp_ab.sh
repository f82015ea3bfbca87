#!/usr/bin/env bash
# Branch reduce-ilp (issues 49 / 50): the row max and row sum with more
# independent accumulators (MosaicConfig.reduce_ilp: Mosaic GPU's acc_ilp;
# its default gives the max of a 64 x 256 tile one vector accumulator a row,
# two chains of 32 FMNMX: the fp8 step's SASS, design.md).  row_tree did the
# same with element-wise temporaries and lost 7% on fp8 d128 S4k N.
# One Hopper GPU, ~7 minutes: ours / cuDNN with reduce_ilp 8 / 16 / 32 in
# one process per dtype (mosaic_bench checks each variant's output against
# cuDNN's), then the fp8 d128 S4k N phase profile with and without.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
OUT=${OUT:-/tmp/reduce_ilp}; mkdir -p "$OUT"
timeout 240 python3 benchmarks/mosaic_bench.py --bench --dtype fp8 --reps 7 \
  --cells d128-4k-N,d128-4k-C,d128-16k-N,d128-16k-C,d64-4k-N \
  --variant reduce_ilp=8 --variant reduce_ilp=16 --variant reduce_ilp=32 > "$OUT/fp8.txt" 2>&1
timeout 200 python3 benchmarks/mosaic_bench.py --bench --reps 7 \
  --cells d64-4k-C,d64-16k-N,d128-16k-N,d256-1k-N,d256-4k-N \
  --variant reduce_ilp=16 --variant reduce_ilp=32 > "$OUT/bf16.txt" 2>&1
for v in "" "reduce_ilp=16"; do
  timeout 60 python3 -m tools.kernel_profile --cell d128-4k-N --dtype fp8 ${v:+--variant $v} \
    > "$OUT/profile${v:+_ilp16}.txt" 2>&1; grep -A5 "| phase\|softmax.s cycles" "$OUT/profile${v:+_ilp16}.txt"
done
for f in fp8 bf16; do echo "== $f"; grep -A40 "| cell | variant" "$OUT/$f.txt" | cut -d'|' -f2,3,4,6,7; done
