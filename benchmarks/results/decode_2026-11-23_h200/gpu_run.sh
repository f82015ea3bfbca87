#!/bin/bash
# Issue 15, H200: the decode tests (slow GPU-size ones included) and the full
# decode_bench table (every cell, every peer) with both timings, per call and
# in-jit (R calls in one jitted loop, the summary's TB/s), in <= 300 s.
# Run from the repository root (installs nothing: jax, flax, chex, triton,
# torch preinstalled), e.g.
#   bash benchmarks/results/decode_2026-11-23_h200/gpu_run.sh
# Writes under $OUT (default /tmp/decode_out); prints the tables last.
T0=$SECONDS
export PYTHONPATH=$PWD XLA_PYTHON_CLIENT_PREALLOCATE=false
OUT=${OUT:-/tmp/decode_out}
mkdir -p "$OUT"
cp "$0" "$OUT/" 2>/dev/null
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/device.txt"
git log -1 --format='code: %h %s' 2>/dev/null | cut -c1-120 | tee "$OUT/commit.txt"

timeout 95 python3 -m pytest -q -p no:benchmark -p no:cacheprovider \
  -m "slow or not slow" -n 4 tests/test_decode.py tests/test_decode_bench.py \
  > "$OUT/pytest_decode.log" 2>&1
echo "pytest rc $? ($((SECONDS - T0)) s)"
grep -E "passed|failed|error" "$OUT/pytest_decode.log" | tail -3

# The bench stops starting implementations at --budget-s; the last cell's
# interleaved timing and the table need the margin below that.
LEFT=$((285 - (SECONDS - T0)))
timeout $((LEFT - 5)) python3 -m benchmarks.decode_bench --reps 5 --small-reps 15 \
  --sample-s 0.03 --budget-s $((LEFT - 50)) --out "$OUT/bench" > "$OUT/bench.log" 2>&1
echo "bench rc $? ($((SECONDS - T0)) s)"

# Optional, if time is left: 1:1:4k with 16 calls per loop iteration (does
# the default 2 leave the in-jit figure bound by per-iteration launches?).
LEFT=$((290 - (SECONDS - T0)))
if [ $LEFT -gt 45 ]; then
  timeout $((LEFT - 10)) python3 -m benchmarks.decode_bench --cells 1:1:4k \
    --reps 5 --small-reps 15 --sample-s 0.03 --jit-unroll 16 \
    --out "$OUT/bench_unroll16" > "$OUT/bench_unroll16.log" 2>&1
  echo "unroll-16 rc $? ($((SECONDS - T0)) s)"
fi

# Per-row log lines (both timings, R), the loop checks, then the tables.
grep -E "^  [0-9]+:" "$OUT/bench.log" | cut -c1-190
python3 - "$OUT" <<'PY'
import json, os, sys
from benchmarks.decode_bench import table
out = sys.argv[1]
for sub in ("bench_unroll16", "bench"):  # the full table last
  path = os.path.join(out, sub, "decode.json")
  if not os.path.exists(path):
    print(f"{sub}: no decode.json"); continue
  d = json.load(open(path))
  print(f"\n== {sub}: {d['meta']['device']}, jax {d['meta']['jax']}, "
        f"{d['meta']['date']}, unroll {d['meta'].get('jit_unroll')}")
  for r in d["rows"]:
    if "jit_loops" in r:
      loops = "; ".join(f"trip {l['trip_count']} cc {l['body_ops']['custom-call']} "
                        f"dot {l['body_ops']['dot']}" for l in r["jit_loops"])
      print(f"  loop {r['cell']:16s} {r['impl']:10s} R {r['jit_calls']:3d} "
            f"[{loops}] finite {r['jit_finite']}")
    elif "jit_status" in r:
      print(f"  loop {r['cell']:16s} {r['impl']:10s} {r['jit_status'][:100]}")
  print(table(d["rows"], d["meta"]["peak_tbs"] or 1.0))
PY
echo "total $((SECONDS - T0)) s"
