#!/usr/bin/env bash
# Issue 49 on one Hopper GPU, under 8 minutes: tests/test_fp8.py natively
# (GPU-sized cases included), the fp8 wgmma probe, the fp8 benchmark cells
# against cuDNN's fp8 attention (forward; B x S = 16k, hidden 2048), the
# accuracy table; the short tables last.  From the repository root:
#
#   bash tools/fp8_gpu.sh      (PYTHON=... picks the interpreter; OUT=DIR)
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/pallas_flash_fp8}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
workers=$(( $(nproc) < 8 ? $(nproc) : 8 ))
XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_FLAGS="--xla_gpu_autotune_level=0" \
  timeout 200 "$PY" -m pytest tests/test_fp8.py -m "slow or not slow" \
  -n "$workers" -p no:cacheprovider -q -rfE --durations=5 \
  > "$OUT/tests.txt" 2>&1
echo "tests rc=$?" >> "$OUT/tests.txt"
timeout 60 "$PY" -m tools.fp8_probe > "$OUT/probe.txt" 2>&1
timeout 240 "$PY" -m benchmarks.run --dtype fp8 --workloads convention \
  --head-dims 64 128 256 --seqlens 4096 16384 \
  --impls ours-mosaic cudnn-fp8 --reps 11 --no-plots --out "$OUT/bench" \
  --match "d64 S16k N" "d64 S4k N" "d128 S4k" "d128 S16k" "d256 S4k N" \
  > "$OUT/bench.txt" 2>&1
timeout 90 "$PY" -m benchmarks.fp8_accuracy > "$OUT/accuracy.txt" 2>&1
echo "== tests"; tail -12 "$OUT/tests.txt"
echo "== probe"; tail -3 "$OUT/probe.txt"
echo "== benchmark (log tail)"; grep -E "ours-mosaic|cudnn-fp8|did not|wrong|Error" "$OUT/bench.txt" | tail -30
echo "== forward TFLOP/s"; sed -n '/TFLOP\/s, forward (/,/^$/p' "$OUT/bench/table.md" 2>/dev/null | head -14
echo "== accuracy"; tail -8 "$OUT/accuracy.txt"
