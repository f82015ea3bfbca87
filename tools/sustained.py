"""Sustained forward throughput: each implementation back to back for a few
seconds, with the SM clock and board power that nvidia-smi samples meanwhile.

Short interleaved bursts (``mosaic_bench``) finish before the GPU reaches its
power cap; a training step does not.  At the cap the driver lowers the clock
of a kernel that draws more power per cycle, so this is the number that
decides a config.  Usage (GPU machine, tokamax optional):

  python3 tools/sustained.py [--cells d128S4kC,d64S16kN] [--seconds 4]
      [--rounds 2] [--variant FIELD=VALUE,...]   (repeatable, as in mosaic_bench)

The GPU warms up over a run and a hotter chip leaks more power, so at the cap
a later entry gets a slightly lower clock; with ``--rounds 2`` every other
round runs the implementations in reverse order and the table gives the mean
over rounds (each round's number after it).
"""
from __future__ import annotations

import argparse
import datetime
import subprocess
import tempfile
import time

import jax

from benchmarks import mosaic_bench as mb


def cell_name(h, t, causal):
  return f"d{h}S{t // 1024}k{'C' if causal else 'N'}"


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--cells", default="")
  ap.add_argument("--seconds", type=float, default=4.0)
  ap.add_argument("--rounds", type=int, default=1)
  ap.add_argument("--variant", action="append", default=[])
  args = ap.parse_args()
  want = set(filter(None, args.cells.split(",")))
  variants = [mb.parse_variant(v) for v in args.variant]
  # nvidia-smi writes to a file: into an unread pipe it would block once the
  # pipe is full (about two minutes of samples) and sample nothing more.
  smi_log = tempfile.TemporaryFile("w+")
  smi = subprocess.Popen(
      ["nvidia-smi",
       "--query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu",
       "--format=csv,noheader,nounits", "-lms", "100"],
      stdout=smi_log, text=True)
  marks = []  # (cell, impl, t_from, t_to, TFLOP/s)
  for h, t, causal in mb.CELLS:
    if want and cell_name(h, t, causal) not in want:
      continue
    b, _, (q, k, v), flops = mb.cell_inputs(h, t, causal)
    fns = mb.cell_calls(h, t, causal, b, variants, with_tokamax=True)
    for f in fns.values():
      jax.block_until_ready(f(q, k, v))  # compile, warm up
    for r in range(args.rounds):
      names = list(fns) if r % 2 == 0 else list(fns)[::-1]
      for name in names:
        f = fns[name]
        start, count, t0 = time.time(), 0, time.perf_counter()
        while time.time() - start < args.seconds:
          out = f(q, k, v)
          count += 1
          if count % 20 == 0:
            jax.block_until_ready(out)
        jax.block_until_ready(out)
        tflops = flops * count / (time.perf_counter() - t0) / 1e12
        # Clock and power from the second half on, when they have settled.
        marks.append((cell_name(h, t, causal), name,
                      start + args.seconds / 2, time.time(), tflops))
        time.sleep(1.0)
  smi.terminate()
  smi.wait()
  smi_log.seek(0)
  samples = []
  for line in smi_log.read().strip().splitlines():
    ts, *vals = (x.strip() for x in line.split(","))
    stamp = datetime.datetime.strptime(ts, "%Y/%m/%d %H:%M:%S.%f").timestamp()
    samples.append((stamp, *map(float, vals)))
  rows = {}  # (cell, impl) -> [(TFLOP/s, MHz, W, C) per round]
  for cell, name, a, z, tflops in marks:
    s = [x for x in samples if a <= x[0] <= z] or [(0, *[float("nan")] * 3)]
    means = [sum(x[i] for x in s) / len(s) for i in (1, 2, 3)]
    rows.setdefault((cell, name), []).append((tflops, *means))
  print(f"# {time.strftime('%Y-%m-%d')} {jax.devices()[0].device_kind} "
        f"jax {jax.__version__}, {args.seconds:g} s back to back each, "
        f"{args.rounds} round(s)")
  print("| cell | impl | TFLOP/s | per round | SM MHz | W | °C | TFLOP/s per GHz |")
  print("|---|---|---|---|---|---|---|---|")
  for (cell, name), rs in rows.items():
    tflops, mhz, watts, temp = (sum(x[i] for x in rs) / len(rs)
                                for i in range(4))
    each = " / ".join(f"{x[0]:.0f}" for x in rs)
    print(f"| {cell} | {name} | {tflops:.0f} | {each} | {mhz:.0f} | "
          f"{watts:.0f} | {temp:.0f} | {tflops / mhz * 1e3:.0f} |")

if __name__ == "__main__":
  main()
