#!/usr/bin/env bash
# Branch alibi-ffma (issue 50, ALiBi within 2%): the forward's per-step ALiBi
# key vector by one FFMA a key (MosaicConfig.alibi_fma_keys, on here; the
# variant alibi_fma_keys=False is main's form).  SASS of the d64 S4k N
# forward, 2026-11-29: ALiBi's side-static loops are +292 instructions a step
# over no ALiBi (742), 192 of them the key vector's IADD3 / I2FP / FMUL.
# One Hopper GPU, ~4 minutes: the ALiBi tests natively (the FFMA form runs
# only there: interpret mode keeps the jnp form), then ours with and without
# ALiBi, and the control variant, in one process (gradients checked against
# the Pallas-Triton kernels with ALiBi).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
OUT=${OUT:-/tmp/alibi_ffma}; mkdir -p "$OUT"
XLA_FLAGS=--xla_gpu_autotune_level=0 timeout 200 python3 -m pytest tests/test_mosaic.py tests/test_bias_dropout.py \
  -m "slow or not slow" -k alibi -n 8 -p no:cacheprovider -q -rfE > "$OUT/tests.txt" 2>&1; tail -3 "$OUT/tests.txt"
timeout 300 python3 benchmarks/bwd_bench.py --cells d64-4k-N,d64-4k-C,d128-4k-N,d128-4k-C --alibi \
  --variant fwd.alibi_fma_keys=False --only "ours,ours alibi,triton alibi,ours[fwd.alibi_fma_keys=False]" \
  --reps 11 > "$OUT/bench.txt" 2>&1
tail -30 "$OUT/bench.txt"
