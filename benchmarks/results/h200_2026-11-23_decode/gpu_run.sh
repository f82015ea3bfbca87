#!/bin/bash
# Issue 15, H200, run 6, call 2 of 2 (after the sweep of sweep_run.sh: the
# merge's loads unrolled, 3 stages at batch 1): the decode tests (slow
# GPU-size ones included), the full decode_bench table (every cell, every
# peer, per call and in-jit), then, if time is left, the batch-1 sweep
# around the new rule (1:1:128k, 1:1:32k) until $END s (default 400; with
# END=330 the sweep is skipped), in <= END + 10 s.
# Run from the repository root:
#   bash benchmarks/results/decode_2026-11-23c_h200/gpu_run.sh
# Writes under $OUT (default /tmp/decode_out); prints the tables last.
T0=$SECONDS
export PYTHONPATH=$PWD XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/decode_out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader \
  | tee "$OUT/bench.log"

timeout 100 python3 -m pytest -q -p no:benchmark -p no:cacheprovider \
  -m "slow or not slow" -n 4 tests/test_decode.py tests/test_decode_bench.py \
  > "$OUT/pytest_decode.log" 2>&1
echo "pytest rc $? ($((SECONDS - T0)) s)"
grep -E "passed|failed|error" "$OUT/pytest_decode.log" | tail -3

# Same bench settings as run 5; the bench stops starting implementations at
# --budget-s, the last cell's interleaved timing and the table need the margin.
LEFT=$((330 - (SECONDS - T0)))
timeout $((LEFT + 10)) python3 -m benchmarks.decode_bench --reps 5 --small-reps 15 \
  --sample-s 0.03 --budget-s $((LEFT - 50)) --out "$OUT/bench" >> "$OUT/bench.log" 2>&1
echo "bench rc $? ($((SECONDS - T0)) s)"

LEFT=$((${END:-400} - (SECONDS - T0)))
if [ $LEFT -gt 40 ]; then
  timeout $((LEFT - 5)) python3 -m benchmarks.decode_sweep --cells 1:1:128k,1:1:32k \
    --budget-s $((LEFT - 30)) --hlo-cells none --out "$OUT/sweep_b1" > "$OUT/sweep_b1.log" 2>&1
  echo "sweep b1 rc $? ($((SECONDS - T0)) s)"
  rm -f "$OUT/sweep_b1/sweep.md"
  sed -n '/^| cell/,$p' "$OUT/sweep_b1.log"
fi

grep -E "^  [0-9]+:" "$OUT/bench.log" | cut -c1-190
python3 - "$OUT" <<'PY'
import json, os, sys
from benchmarks.decode_bench import table
out = sys.argv[1]
path = os.path.join(out, "bench", "decode.json")
d = json.load(open(path))
print(f"\n== {d['meta']['device']}, jax {d['meta']['jax']}, {d['meta']['date']}")
for r in d["rows"]:
  if "jit_loops" in r:
    loops = "; ".join(f"trip {l['trip_count']} cc {l['body_ops']['custom-call']} "
                      f"fus {l['body_ops']['fusion']}" for l in r["jit_loops"])
    print(f"  loop {r['cell']:16s} {r['impl']:10s} R {r['jit_calls']:3d} [{loops}]")
print(table(d["rows"], d["meta"]["peak_tbs"] or 1.0))
PY
echo "total $((SECONDS - T0)) s"
