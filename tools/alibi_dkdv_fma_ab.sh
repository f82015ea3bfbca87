#!/usr/bin/env bash
# Branch alibi-dkdv-fma (issue 50, ALiBi within 2%): the d64 dK/dV kernel's
# per-step ALiBi query vector by one FFMA a query
# (MosaicBackwardConfig.alibi_fma_queries; main computes it as an IADD3, an
# I2FP and an FMUL a query).  With ALiBi the fused d64 dK/dV kernel still
# spills 848 / 1668 bytes at S4k N (H200, 2026-11-29, fixed keys).
# One Hopper GPU, ~4 minutes: ours, ours ALiBi and the variant in one
# process (gradients checked against the Pallas-Triton kernels with ALiBi),
# then ptxas's spills with and without.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
OUT=${OUT:-/tmp/alibi_dkdv_fma}; mkdir -p "$OUT"
V="alibi_fma_queries=True"
timeout 240 python3 benchmarks/bwd_bench.py --cells d64-4k-N,d64-4k-C,d64-16k-N --alibi --reps 9 \
  --variant $V --only "ours,ours alibi,ours[$V],triton alibi" > "$OUT/bwd.txt" 2>&1
grep "^d\|TFLOP" "$OUT/bwd.txt"
timeout 120 python3 -m tools.ptxas_report --head-dims 64 --seqlens 4096 --features alibi --jobs 8 \
  --variant $V > "$OUT/ptxas.txt" 2>&1
tail -8 "$OUT/ptxas.txt"
