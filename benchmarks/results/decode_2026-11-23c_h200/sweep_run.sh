#!/bin/bash
# Issue 15, H200, run 6, call 1 of 2: the in-jit launch-config sweep of
# benchmarks/decode_sweep.py (run 6's PLAN: batch-1 variants around the rule
# at 1:1:128k, 1:1:32k, 1:1:4k; the merge's loads unrolled or looped at
# batch 32), DecodeConfig variants of ours against cuDNN (and XLA at batch
# 1), interleaved per cell, in <= 400 s.  Run from the repository root:
#   bash benchmarks/results/decode_2026-11-23c_h200/sweep_run.sh
# Writes under $OUT (default /tmp/decode_sweep); prints the table last.
T0=$SECONDS
export PYTHONPATH=$PWD XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/decode_sweep}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/device.txt"
timeout 380 python3 -m benchmarks.decode_sweep --budget-s 300 --out "$OUT" \
  > "$OUT/sweep.log" 2>&1
echo "sweep rc $? ($((SECONDS - T0)) s)"
grep -E "did not run|Error" "$OUT/sweep.log" | cut -c1-200 | head -5
sed -n '/^| cell/,$p' "$OUT/sweep.log"
echo "total $((SECONDS - T0)) s"
