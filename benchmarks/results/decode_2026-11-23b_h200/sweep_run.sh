#!/bin/bash
# Issue 15, H200, call 1 of 2: the in-jit launch-config sweep
# (benchmarks/decode_sweep.py: DecodeConfig variants of ours against cuDNN,
# and XLA at batch 1, interleaved per cell) and the optimised HLO of ours'
# and cuDNN's 1:1:4k loops, in <= 270 s.  Run from the repository root:
#   bash benchmarks/results/decode_2026-11-23b_h200/sweep_run.sh
# Writes under $OUT (default /tmp/decode_sweep); prints the table last.
T0=$SECONDS
export PYTHONPATH=$PWD XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/decode_sweep}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/device.txt"
timeout 262 python3 -m benchmarks.decode_sweep --budget-s 215 --out "$OUT" \
  > "$OUT/sweep.log" 2>&1
echo "sweep rc $? ($((SECONDS - T0)) s)"
grep -E "did not run|Error" "$OUT/sweep.log" | cut -c1-200 | head -5
# The ops of each 1:1:4k loop body (per iteration) beside the kernels.
python3 - "$OUT" <<'PY'
import glob, sys
from benchmarks.decode_bench import hlo_while_loops
for path in sorted(glob.glob(sys.argv[1] + "/hlo_*.txt")):
  print(path.rsplit("/", 1)[1], hlo_while_loops(open(path).read()))
PY
sed -n '/^| cell/,$p' "$OUT/sweep.log"
echo "total $((SECONDS - T0)) s"
