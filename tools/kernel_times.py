"""Device time per kernel of a jitted forward+backward, rows side by side.

``bwd_bench.py`` times whole calls: when a variant's forward gains and its
fwd+bwd does not, it cannot say which kernel took the difference back.  This
runs the same rows (``bwd_bench.cell_impls``: ours, its ``--variant``s, the
peers) under ``jax.profiler.trace`` and reads the device's own kernel spans
from the trace (``jax.profiler.ProfileData``; no TensorBoard needed): per
row, per kernel (the trace's kernel name, shortened), how many launches a
call makes and the median device microseconds per call over the rounds,
then the call's kernel total and its wall time per call (the difference is
launch gaps and host time).  Rows alternate by round (each round traces
every row once, a burst of ``--calls`` calls, in a fresh random order), so
drift falls on all of them.  The trace's own overhead stays out of the
kernels' spans.

  PYTHONPATH=$PWD python3 -m tools.kernel_times --cell d64-4k-C
      --variant fwd.persistent=False --only "ours,ours[fwd.persistent=False]"
      [--alibi] [--dropout 0.1] [--bias] [--rounds 5] [--calls 20] [--forward]
  PYTHONPATH=$PWD python3 -m tools.kernel_times --cell d128-4k-C --dtype fp8
      [--variant consumers=2]   (forward: ours, its variants, cudnn-fp8)

``--bias`` gives the rows that ``bwd_bench.takes_bias`` names (``ours
bias``, ``cudnn bias``, the variants) ``bwd_bench.bias_input`` as an
argument, differentiated (dbias).

``--dtype fp8`` times the forward on float8_e4m3fn inputs with
``mosaic_bench --dtype fp8``'s rows (``mosaic_bench.fp8_calls``, per-tensor
descales): ours ("mosaic[default]"), each ``--variant`` over the default
config, and cuDNN's fp8 attention, so the kernels' device time is compared
without the launch gaps of a wall-clock ratio.

On the CPU it runs too (the interpret-mode kernels are host work, so the
table lists the XLA ops of the host's XLA threads, and misses those run on
the calling thread: a check of the plumbing, not a measurement).
"""
from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import statistics
import tempfile
import time

import jax
import numpy as np

from benchmarks import bwd_bench, mosaic_bench
import pallas_flash as pf


def short_name(name: str) -> str:
  """A kernel's name without the template / argument noise of a trace
  (``void foo<...>(...)`` -> ``foo``), at most 60 characters."""
  name = re.sub(r"^void\s+", "", name)
  name = re.split(r"[<(]", name, maxsplit=1)[0] or name
  return name[:60]


def device_spans(xplane_path: str) -> list[tuple[str, float]]:
  """[(kernel name, microseconds)] of every event on the trace's device
  planes (``/device:GPU:N``); on a machine without one, the XLA ops of the
  host's compute threads (``/host:CPU`` lines other than ``python``)."""
  from jax.profiler import ProfileData
  data = ProfileData.from_file(xplane_path)
  planes = list(data.planes)
  gpu = [p for p in planes if p.name.startswith("/device:GPU")]
  spans = []
  if gpu:
    for plane in gpu:
      for line in plane.lines:
        # A device plane has stream lines (kernels) and summary lines
        # ("XLA Ops", "XLA Modules", ...) that repeat them: streams only.
        if not line.name.startswith("Stream"):
          continue
        spans += [(e.name, e.duration_ns / 1e3) for e in line.events]
    if not spans:
      raise RuntimeError("no stream lines on the device planes: " + str(
          [(p.name, [line.name for line in p.lines]) for p in gpu]))
    return spans
  for plane in planes:
    if plane.name != "/host:CPU":
      continue
    for line in plane.lines:
      if line.name.startswith("tf_XLA"):
        spans += [(e.name, e.duration_ns / 1e3) for e in line.events]
  return spans


def per_call(spans, calls: int) -> dict[str, tuple[float, float]]:
  """{short kernel name: (launches per call, device us per call)}."""
  count, total = collections.Counter(), collections.Counter()
  for name, us in spans:
    count[short_name(name)] += 1
    total[short_name(name)] += us
  return {k: (count[k] / calls, total[k] / calls) for k in count}


def trace_rows(rows: dict, rounds: int, calls: int, seed: int = 0):
  """({row: [per_call dict per round]}, {row: [wall us per call]}): each
  round traces a burst of ``calls`` calls of every row (``rows``: {name:
  (f, args)}, compiled and warm), the rows in a seeded random order."""
  out = {name: [] for name in rows}
  wall = {name: [] for name in rows}
  names = list(rows)
  rng = np.random.default_rng(seed)
  for _ in range(rounds):
    for i in rng.permutation(len(names)):
      name = names[i]
      f, args = rows[name]
      with tempfile.TemporaryDirectory() as d:
        with jax.profiler.trace(d):
          t0 = time.perf_counter()
          for _ in range(calls):
            res = f(*args)
          jax.block_until_ready(res)
          wall[name].append((time.perf_counter() - t0) / calls * 1e6)
        del res
        (path,) = glob.glob(os.path.join(d, "**", "*.xplane.pb"),
                            recursive=True)
        out[name].append(per_call(device_spans(path), calls))
  return out, wall


def table(traced: dict, wall: dict) -> str:
  """Per row: its kernels (launches per call, median us per call), their
  total and the wall time per call; the kernels in order of time."""
  lines = []
  for name, per_round in traced.items():
    kernels = sorted({k for r in per_round for k in r},
                     key=lambda k: -statistics.median(
                         r.get(k, (0, 0))[1] for r in per_round))
    lines.append(name)
    for k in kernels:
      n = statistics.median(r.get(k, (0, 0))[0] for r in per_round)
      us = [r.get(k, (0, 0))[1] for r in per_round]
      lines.append(f"  {k:60s} x{n:<4g} {statistics.median(us):9.1f} us "
                   f"[{min(us):.1f}, {max(us):.1f}]")
    totals = [sum(us for _, us in r.values()) for r in per_round]
    lines.append(f"  {'kernels total':60s}       {statistics.median(totals):9.1f}"
                 f" us   wall {statistics.median(wall[name]):9.1f} us per call")
  first = next(iter(traced))
  if len(traced) > 1:
    lines.append(f"kernels total of {first} over each row's (above 1: the row "
                 "is faster), per round, median [min, max]:")
  base = [sum(us for _, us in r.values()) for r in traced[first]]
  for name, per_round in list(traced.items())[1:]:
    totals = [sum(us for _, us in r.values()) for r in per_round]
    ratios = [b / t if t else float("nan") for b, t in zip(base, totals)]
    lines.append(f"  {name:60s} {statistics.median(ratios):.3f} "
                 f"[{min(ratios):.3f}, {max(ratios):.3f}]")
  return "\n".join(lines)


def bf16_rows(h, causal, t, n, q, k, v, variants, args) -> dict:
  """{row: (compiled f, args)}: ``--only``'s rows of
  ``bwd_bench.cell_impls``, forward+backward (``bwd_bench.fwd_bwd``) unless
  ``--forward``; ``cudnn det`` with bwd_bench's deterministic options."""
  do = jax.random.normal(jax.random.key(99), q.shape, q.dtype)
  impls = bwd_bench.cell_impls(h, t, causal, variants, n, args.alibi,
                               args.dropout, args.bias)
  bias = (bwd_bench.bias_input(n, t),) if args.bias else ()
  rows = {}
  for name in bwd_bench.parse_only(args.only):
    inputs = (q, k, v, *bias) if bwd_bench.takes_bias(name, args.bias) else (
        q, k, v)
    f, a = ((jax.jit(impls[name]), inputs) if args.forward else
            (bwd_bench.fwd_bwd(impls[name]), (*inputs, do)))
    # cudnn det: compiled deterministic, as in bwd_bench
    rows[name] = (f.lower(*a).compile(bwd_bench.COMPILE_OPTIONS.get(name)), a)
  return rows


def fp8_rows(h, causal, t, q, k, v, variants) -> dict:
  """{row: (jitted f, args)}: ``mosaic_bench.fp8_calls`` on e4m3 q, k, v
  (per-tensor descales): ours with the default config ("mosaic[default]",
  first, the table's base), each variant that ``fitting_configs`` takes
  (the others printed with the reason), cuDNN fp8 last."""
  configs, skipped = mosaic_bench.fitting_configs(h, causal, t, variants,
                                                  fp8=True)
  for text, reason in skipped:
    print(f"skipped [{text}]: {reason}")
  calls = mosaic_bench.fp8_calls(
      h, causal, tuple(pf.fp8.quantize(x) for x in (q, k, v)), configs)
  return {name: calls[name]
          for name in sorted(calls, key=lambda name: name == "cudnn-fp8")}


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--cell", required=True, help="e.g. d64-4k-C")
  ap.add_argument("--variant", action="append", default=[],
                  help="as bwd_bench's (fwd.persistent=False, ...)")
  ap.add_argument("--only", default="ours",
                  help="rows, as bwd_bench's --only")
  ap.add_argument("--alibi", action="store_true")
  ap.add_argument("--dropout", type=float, default=0.0)
  ap.add_argument("--bias", action="store_true",
                  help="a [1, N, T, S] bias with dbias for the bias rows")
  ap.add_argument("--rounds", type=int, default=5)
  ap.add_argument("--calls", type=int, default=20)
  ap.add_argument("--dtype", choices=("bf16", "fp8"), default="bf16",
                  help="fp8: the forward on e4m3 inputs, against cuDNN fp8")
  ap.add_argument("--forward", action="store_true",
                  help="the forward alone, not forward+backward")
  args = ap.parse_args()
  (h, t, causal), = [c for c in bwd_bench.CELLS
                     if bwd_bench.cell_name(*c) == args.cell]
  b, n, (q, k, v), _ = mosaic_bench.cell_inputs(h, t, causal)
  variants = [mosaic_bench.parse_variant(x) for x in args.variant]
  if args.dtype == "fp8":
    rows = fp8_rows(h, causal, t, q, k, v, variants)
  else:
    rows = bf16_rows(h, causal, t, n, q, k, v, variants, args)
  for f, a in rows.values():
    jax.block_until_ready(f(*a))  # compile, warm
  traced, wall = trace_rows(rows, args.rounds, args.calls)
  what = "forward" if args.forward or args.dtype == "fp8" else "fwd+bwd"
  print(f"{args.cell} {args.dtype} {what}, "
        f"{jax.devices()[0].device_kind}, jax {jax.__version__}, "
        f"{args.rounds} rounds x {args.calls} calls")
  print(table(traced, wall))


if __name__ == "__main__":
  main()
