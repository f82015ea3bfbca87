"""Cycles per phase of the Mosaic GPU forward, per warpgroup (GPU only).

Runs one cell's forward (the dispatcher's config, or with ``--variant``'s
fields; optionally with dropout, ALiBi or a bias) twice with Mosaic GPU's
profiler on (``plgpu.CompilerParams(profile_space=, profile_dir=)``, patched
into this process's kernel calls: the profiler records a clock at the entry
and exit of every named region), reads the second call's trace (one Perfetto
JSON per call; open it in ui.perfetto.dev for the timeline) and prints, per
phase that ``mosaic/forward.py`` names (``phase``): without the softmax
overlap "S" (issue and wait), "softmax", "V wait", "turn", "PV"; with it "K V
wait", "turn", "GEMMs and softmax" holding "S wait" and "softmax", and "pack
P" (fp8), the count, median and mean cycles and the share of the warpgroups'
time; then the median gap between consecutive top-level phases, where the
unnamed work goes (slot releases, O's rescale); then how much of each
softmax another warpgroup on the same SM spent in its own softmax (the two
contend for the sub-partitions' MUFU) or in its GEMM phases (the overlap
that FA3's ping-pong aims at).  Warpgroups are aligned by the profiler's
per-warpgroup start stamp (%globaltimer, ns) plus their %clock cycles, so
the overlaps hold to about the timer's resolution.

The events live in shared memory (16 bytes per phase per warpgroup beside
the kernel's own buffers) until the kernel ends, so keep the run small: one
batch row by default (``--batch``) and ``--space`` above the phases one
warpgroup records (steps x phases per step).  A kernel the buffer pushes
past the shared memory is retried with half the space, a trace that
overflows it (a persistent CTA running several items) with half the heads.
The clock reads cost a few cycles each (the dump subtracts an estimate).
docs/design.md ("The fp8 forward", "Where the time goes"; "What the features
cost per step") has what it found.

  PYTHONPATH=$PWD python3 -m tools.kernel_profile --cell d128-4k-N
      [--dtype fp8] [--variant overlap_softmax=True,block_kv=128]
      [--dropout 0.1] [--alibi] [--bias] [--batch 1] [--heads N] [--space 1000]
      [--keep DIR]
"""
from __future__ import annotations

import argparse
import collections
import functools
import glob
import json
import os
import statistics
import sys
import tempfile
from unittest import mock


def intervals(events: list[dict]) -> dict:
  """{(pid, tid): [(start, end, name, depth), ...] sorted by start} of a
  Perfetto trace's events: "B" / "E" pairs per (pid, tid) track, ``ts`` in
  units of 1000 cycles, as Mosaic GPU's profiler writes them; depth 0 for a
  top-level phase."""
  opened = collections.defaultdict(list)
  tracks = collections.defaultdict(list)
  for e in events:
    key, t = (e["pid"], e["tid"]), e["ts"] * 1e3
    if e["ph"] == "B":
      opened[key].append((e["name"], t))
    else:
      name, t0 = opened[key].pop()
      tracks[key].append((t0, t, name, len(opened[key])))
  return {key: sorted(done) for key, done in tracks.items()}


def summarise(events: list[dict]) -> dict:
  """{"phases": {name: [cycles, ...]}, "gaps": {"a -> b": [cycles, ...]},
  "tracks": warpgroups with events, "span": their mean cycles from first
  event to last} of a Perfetto trace's events (``intervals``)."""
  phases, gaps, spans = (collections.defaultdict(list),
                         collections.defaultdict(list), [])
  for done in intervals(events).values():
    spans.append(max(d[1] for d in done) - done[0][0])
    for t0, t1, name, _ in done:
      phases[name].append(t1 - t0)
    top = [d for d in done if d[3] == 0]
    for (_, end, a, _), (start, _, b, _) in zip(top, top[1:]):
      gaps[f"{a} -> {b}"].append(start - end)
  return dict(phases=dict(phases), gaps=dict(gaps), tracks=len(spans),
              span=statistics.mean(spans) if spans else 0.0)


def overlaps(events: list[dict], phase: str = "softmax",
             others: dict[str, tuple[str, ...]] | None = None) -> dict:
  """{label: [fraction, ...]}: for every ``phase`` interval of a track, the
  share of its cycles during which another track on the same SM (``pid``)
  was inside any phase of ``others[label]`` (default: the same phase, and
  the GEMM phases "S", "PV", "GEMMs and softmax"); tracks from
  ``intervals``."""
  others = others or {phase: (phase,), "GEMMs": ("S", "PV",
                                                  "GEMMs and softmax")}
  spans = intervals(events)
  by_sm = collections.defaultdict(list)  # pid: its tracks
  for pid, tid in spans:
    by_sm[pid].append(tid)

  def covered(t0, t1, ivs):  # cycles of [t0, t1] inside the union
    total, end = 0.0, t0
    for a, b in sorted(ivs):
      a, b = max(a, end), min(b, t1)
      if b > a:
        total += b - a
        end = b
    return total

  out = {label: [] for label in others}
  for (pid, tid), mine in spans.items():
    rest = [iv for t in by_sm[pid] if t != tid for iv in spans[(pid, t)]]
    for t0, t1, name, _ in mine:
      if name != phase or t1 <= t0:
        continue
      for label, names in others.items():
        ivs = [(a, b) for a, b, n, _ in rest
               if n in names and b > t0 and a < t1]
        out[label].append(covered(t0, t1, ivs) / (t1 - t0))
  return out


def table(summary: dict) -> str:
  """The phases (longest total first) and the gaps, as markdown."""
  total = summary["span"] * summary["tracks"] or 1.0
  lines = ["| phase | count | median cycles | mean cycles | share of time |",
           "|---|---|---|---|---|"]
  for name, ds in sorted(summary["phases"].items(),
                         key=lambda kv: -sum(kv[1])):
    lines.append(f"| {name} | {len(ds)} | {statistics.median(ds):.0f} | "
                 f"{statistics.mean(ds):.0f} | {sum(ds) / total:.1%} |")
  lines += ["", "| gap between phases | count | median cycles |",
            "|---|---|---|"]
  for name, ds in sorted(summary["gaps"].items()):
    if len(ds) >= 10:  # (not the few around an item's start and end)
      lines.append(f"| {name} | {len(ds)} | {statistics.median(ds):.0f} |")
  return "\n".join(lines)


def profile(h: int, t: int, causal: bool, fp8: bool, variant: str,
            features: dict, batch: int, space: int, out_dir: str,
            heads: int = 0) -> tuple[str, int]:
  """Runs the cell's forward twice, the config the dispatcher's own choice
  with ``variant``'s fields (``MosaicConfig`` fields, ``'a=1,b=2'``), and the
  profiler writing to out_dir; returns (the second call's trace file, the
  heads it ran).  ``features``: dropout (rate), alibi, bias (bool) as
  ``benchmarks`` runs them.  ``heads``: 0 for the cell's 2048 / h.  A kernel
  the event buffer pushes past the shared memory is retried with half the
  space; a trace that does not fit in it (a persistent CTA runs several
  items) with half the heads, so that each CTA runs fewer items."""
  import jax
  import jax.experimental.pallas.mosaic_gpu as plgpu
  import jax.numpy as jnp

  import pallas_flash as pf
  from benchmarks import workloads
  from pallas_flash import fp8 as pf_fp8
  from tools.ptxas_report import with_variant
  if variant:  # (this process's MosaicConfig.default)
    with_variant(",".join(f"fwd.{item}" for item in variant.split(",")))
  keys = jax.random.split(jax.random.key(0), 4)
  static = {}  # Python values the jit closes over
  if features.get("dropout"):
    static["dropout_rate"] = features["dropout"]
  f = jax.jit(lambda q, k, v, kw: pf.flash_attention(
      q, k, v, is_causal=causal, implementation="mosaic", **static, **kw))

  def inputs(n):
    q, k, v = (jax.random.normal(key, (batch, t, n, h), jnp.bfloat16)
               for key in keys[:3])
    kw = {}
    if features.get("dropout"):
      kw["dropout_rng"] = keys[3]
    if features.get("alibi"):
      kw["alibi_slopes"] = workloads.alibi_slopes(n)
    if features.get("bias"):
      kw["bias"] = jnp.zeros((1, n, t, t), jnp.bfloat16)
    if fp8:
      if kw:
        raise ValueError("the fp8 forward takes no dropout, ALiBi or bias")
      (q, qd), (k, kd), (v, vd) = map(pf_fp8.quantize, (q, k, v))
      kw = dict(q_descale=qd, k_descale=kd, v_descale=vd)
    return q, k, v, kw

  n = heads or 2048 // h
  while True:
    params = functools.partial(plgpu.CompilerParams, profile_space=space,
                               profile_dir=out_dir)
    args = inputs(n)
    try:
      with mock.patch.object(plgpu, "CompilerParams", params):
        for _ in range(2):
          jax.block_until_ready(f(*args))
      break
    except (ValueError, RuntimeError) as e:
      if "exceeds available shared memory" in str(e):
        if space <= 64:  # e.g. d128 with a bias: with_bias fills 225.5 KiB
          sys.exit("kernel_profile: the kernel's config leaves no shared "
                   "memory for the profiler's events even at --space "
                   f"{space} ({e}); profile a variant that takes less, e.g. "
                   "--variant block_kv=64")
        space //= 2
        note = f"no room for the events: --space {space}"
      elif "Insufficient space" in str(e) and n > 1:
        n //= 2
        note = f"the trace does not fit: {n} heads"
      else:
        raise
      print(f"kernel_profile: {note}", file=sys.stderr)
      jax.clear_caches()
  trace = max(glob.glob(os.path.join(out_dir, "*.json")),
              key=os.path.getmtime)
  return trace, n


def main(argv=None):
  from benchmarks.mosaic_bench import parse_cells
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--cell", required=True, help="e.g. d128-4k-N")
  ap.add_argument("--dtype", choices=("bf16", "fp8"), default="bf16")
  ap.add_argument("--variant", default="",
                  help="MosaicConfig fields, e.g. overlap_softmax=True")
  ap.add_argument("--dropout", type=float, default=0.0)
  ap.add_argument("--alibi", action="store_true")
  ap.add_argument("--bias", action="store_true",
                  help="a [1, N, T, S] bf16 bias")
  ap.add_argument("--batch", type=int, default=1)
  ap.add_argument("--heads", type=int, default=0,
                  help="query heads (default 2048 / head dim; halved until "
                       "the trace fits)")
  ap.add_argument("--space", type=int, default=1000,
                  help="phases one warpgroup may record (16 bytes of shared "
                       "memory each; halved until the kernel fits)")
  ap.add_argument("--keep", default="", help="write the traces here")
  args = ap.parse_args(argv)
  import jax
  if jax.default_backend() != "gpu":
    sys.exit("kernel_profile needs a GPU (the profiler runs in the kernel)")
  [(h, t, causal)] = parse_cells(args.cell)
  out_dir = args.keep or tempfile.mkdtemp(prefix="kernel_profile_")
  os.makedirs(out_dir, exist_ok=True)
  features = dict(dropout=args.dropout, alibi=args.alibi, bias=args.bias)
  trace, heads = profile(h, t, causal, args.dtype == "fp8", args.variant,
                         features, args.batch, args.space, out_dir,
                         args.heads)
  with open(trace) as f:
    events = json.load(f)["traceEvents"]
  summary = summarise(events)
  print(f"trace: {trace} (B{args.batch}, {heads} heads)\n"
        f"{summary['tracks']} warpgroups, mean span "
        f"{summary['span']:.0f} cycles\n")
  print(table(summary))
  shares = overlaps(events)
  print("\n| a softmax's cycles while another warpgroup on its SM was in | "
        "count | median | mean |\n|---|---|---|---|")
  for label, xs in shares.items():
    if xs:
      print(f"| {label} | {len(xs)} | {statistics.median(xs):.0%} | "
            f"{statistics.mean(xs):.0%} |")


if __name__ == "__main__":
  main()
