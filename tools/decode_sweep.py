"""Launch-config sweep of the split-KV decode kernel against the peers
(issue 15), timed in-jit like ``decode_bench``'s summary.

    python -m tools.decode_sweep --out DIR [--cells 32:1:4k,1:1:128k]

For each cell of ``decode_bench.CELLS`` (same inputs, same rotated cache
copies): cuDNN (and XLA at batch 1, where it was the best peer) and
``DecodeConfig`` variants of ours (``implementation="triton",
config=...``; the first of each list is the default), each as R calls in one jitted loop (``decode_bench.in_jit``),
all timed in one interleaved set of bursts; every variant's output is checked
against the f32 reference on batch 0 first.  ``--hlo-cells`` writes the
optimised HLO of the loops of ours' first variant and the first peer, to read what runs
per call besides the kernel.

The split count can only be keyed on static shapes (B, T, S, heads, head dim,
SM count): the lengths are traced, so a ragged batch gets the split count of
a full one of the same shape.  The batch-32 variants therefore run on the
full and the ragged 32k cells alike.

Earlier sweeps (per call, from the host; ``benchmarks/RESULTS.md`` as of commit
29bf24f, the last with the run-by-run records): run 1
(H100) had 11 variants within 2-3% except waves=1 at batch 1; run 2 had
block_k 64 best at 1:1:128k and one split best at 32:1:4k; run 3 made
``heads_first`` the default and again had one split fastest at 32:1:4k but
7% slower on the ragged cell.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import time

import jax
import jax.numpy as jnp

import pallas_flash as pf
from pallas_flash.decode import DecodeConfig
from benchmarks import decode_bench as db

_D = DecodeConfig()  # the tuned rule (kernel.launch)


# Variants per regime (B1: B x K = 8 programs per split; B32: 256), each
# list timed with the cell's peers; the tuned rule (``_D``) leads each list.
# Run 5's sweeps (benchmarks/results/decode_2026-11-23b_h200/ as of commit
# 29bf24f) set block_k and the split rule; run 6's (decode_2026-11-23c_h200/sweep/, every config
# in its JSON, names relative to run 5's rule) timed the merge's loads
# unrolled against a loop over chunks (a field since removed), 3 stages, 32
# or 48 splits, block_k 32 and 2 warps, and set 3 stages.  The lists below
# hold the rule's neighbours after run 6.
B1 = [_D, DecodeConfig(num_stages=4), DecodeConfig(num_splits=32),
      DecodeConfig(block_k=32), DecodeConfig(block_k=32, num_stages=4)]
B1_SHORT = [_D, DecodeConfig(num_stages=4), DecodeConfig(block_k=32),
            DecodeConfig(num_stages=2)]
B32 = [_D, DecodeConfig(num_splits=1), DecodeConfig(num_splits=2),
       DecodeConfig(num_splits=4)]
PLAN = {"1:1:128k": (B1, ["cudnn"]), "1:1:32k": (B1, ["cudnn", "xla"]),
        "1:1:4k": (B1_SHORT, ["cudnn", "xla"]),
        "32:1:32k ragged": (B32, ["cudnn"]), "32:16:32k": (B32, ["cudnn"]),
        "32:1:32k": (B32, ["cudnn"]), "32:1:4k": (B32, ["cudnn"])}
# Extra entries with more calls per loop iteration (run 5: 1:1:4k with 16,
# what the loop iteration costs); none in run 6.
UNROLL_EXTRA = {}


def config_name(c: DecodeConfig) -> str:
  if c == _D:
    return "default"
  diff = {f.name: getattr(c, f.name) for f in dataclasses.fields(c)
          if getattr(c, f.name) != getattr(_D, f.name)}
  return ",".join(f"{k}={v}" for k, v in diff.items())


def ours(c: DecodeConfig):
  return lambda q, k, v, lens: pf.flash_attention(
      q, k, v, key_value_seq_lengths=lens, implementation="triton", config=c)


def sweep_cell(label, b, t, s, ragged, args, deadline, peak, out_dir):
  variants, peers = PLAN[label]
  sets, nbytes = db.rotated_inputs(b, t, s, ragged)
  q, k, v, lens = sets[0]
  steps = db.loop_steps(nbytes, peak, args.jit_sample_s, args.jit_max_steps)
  ref = pf.flash_attention(q[:1].astype(jnp.float32), k[:1].astype(jnp.float32),
                           v[:1].astype(jnp.float32), implementation="xla",
                           key_value_seq_lengths=lens[:1])
  builders = db.builders(t)
  todo = [(p, None, builders[p](*sets[0])[0], args.jit_unroll) for p in peers]
  todo += [("ours", c, ours(c), args.jit_unroll) for c in variants]
  if label in UNROLL_EXTRA:
    u = UNROLL_EXTRA[label]
    todo += [(p, None, builders[p](*sets[0])[0], u) for p in peers]
    todo += [("ours", variants[0], ours(variants[0]), u)]
  rows, entries = [], []
  for impl, c, fn, unroll in todo:
    row = dict(cell=label, b=b, t=t, s=s, ragged=ragged, impl=impl,
               config=None if c is None else dataclasses.asdict(c),
               name=impl if c is None else config_name(c), unroll=unroll,
               bytes=nbytes, copies=len(sets))
    if time.time() > deadline:
      row["status"] = "not run: time budget"
      rows.append(row)
      continue
    try:
      out = jax.block_until_ready(jax.jit(fn)(*sets[0]))
      row["rel_err"] = db.rel_err(out[:1], ref)
      del out
      compiled, arg_sets = db._compile_in_jit(row, fn, sets, steps, unroll)
      if out_dir and label in args.hlo_cells.split(",") and unroll == args.jit_unroll \
          and (c == variants[0] or impl == peers[0]):
        path = os.path.join(out_dir, f"hlo_{impl}_{label.replace(':', '_')}.txt")
        with open(path, "w") as fh:
          fh.write(compiled.as_text())
      entries.append((row, (compiled, arg_sets)))
    except Exception as e:  # report, go on
      row["status"] = f"did not run: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
      db.log(f"  {label:16s} {row['name']:34s} {row['status']}")
    rows.append(row)
  reps = args.small_reps if len(sets) > 1 else args.reps
  timed = db.time_bursts([e for _, e in entries], reps, args.sample_s)
  for (row, _), (med, spread) in zip(entries, timed):
    med /= row["jit_calls"]
    row.update(status="ok", jit_s=med, jit_spread=spread,
               jit_tbs=nbytes / med / 1e12,
               jit_pct_peak=100 * nbytes / med / 1e12 / peak if peak else None)
  best_peer = min((r["jit_s"] for r in rows if r.get("status") == "ok"
                   and r["config"] is None and r["unroll"] == args.jit_unroll),
                  default=None)
  for row in rows:
    if row.get("status") != "ok":
      continue
    row["vs_best_peer"] = best_peer / row["jit_s"] if best_peer else None
    db.log(f"  {label:16s} {row['name']:34s} u{row['unroll']:<2d} "
           f"{row['jit_s'] * 1e6:9.1f} us {row['jit_tbs']:5.2f} TB/s "
           f"({row['jit_pct_peak'] or 0:4.1f}%) spread {row['jit_spread']:.2f} "
           f"R {row['jit_calls']} vs best peer {row['vs_best_peer'] or 0:.3f} "
           f"err {row['rel_err']:.1e}")
  return rows


def table(rows) -> str:
  """Markdown: per cell, every variant's in-jit time, TB/s and ratio to the
  cell's best peer (default unroll)."""
  out = ["| cell | variant | unroll | in-jit us | TB/s (% peak) | / best peer |",
         "|---|---|---|---|---|---|"]
  for r in rows:
    if r.get("status") != "ok":
      out.append(f"| {r['cell']} | {r['name']} | {r['unroll']} | {r.get('status')} | | |")
      continue
    out.append(f"| {r['cell']} | {r['name']} | {r['unroll']} | {r['jit_s'] * 1e6:.1f} | "
               f"{r['jit_tbs']:.2f} ({r['jit_pct_peak'] or 0:.0f}%) | "
               f"{r['vs_best_peer'] or 0:.3f} |")
  return "\n".join(out)


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--out", default=None)
  p.add_argument("--cells", default=",".join(PLAN))
  p.add_argument("--reps", type=int, default=5)
  p.add_argument("--small-reps", type=int, default=15)
  p.add_argument("--sample-s", type=float, default=0.02)
  p.add_argument("--budget-s", type=float, default=1e9,
                 help="no variant is compiled after this many seconds")
  p.add_argument("--jit-sample-s", type=float, default=2e-3)
  p.add_argument("--jit-max-steps", type=int, default=256)
  p.add_argument("--jit-unroll", type=int, default=2)
  p.add_argument("--hlo-cells", default="1:1:4k")
  args = p.parse_args(argv)
  deadline = time.time() + args.budget_s
  dev = jax.devices()[0]
  peak = next((v for k_, v in db.PEAK_TBS.items() if k_ in dev.device_kind), None)
  meta = dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(),
              device=dev.device_kind, jax=jax.__version__, peak_tbs=peak,
              sms=getattr(dev, "core_count", None), jit_unroll=args.jit_unroll)
  db.log(f"decode sweep on {dev.device_kind} ({meta['sms']} SMs), jax {jax.__version__}")
  if jax.default_backend() != "gpu":
    db.log("no GPU: nothing to time")
    return 1
  if args.out:
    os.makedirs(args.out, exist_ok=True)
  results = dict(meta=meta, rows=[])
  cells = {c[0]: c for c in db.CELLS}
  for label in args.cells.split(","):
    if time.time() > deadline:
      break
    results["rows"] += sweep_cell(*cells[label], args, deadline, peak, args.out)
    if args.out:
      with open(os.path.join(args.out, "sweep.json"), "w") as fh:
        json.dump(results, fh, indent=1)
  md = table(results["rows"])
  db.log("\n" + md)
  if args.out:
    with open(os.path.join(args.out, "sweep.md"), "w") as fh:
      fh.write(md + "\n")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
