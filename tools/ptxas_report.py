"""ptxas's register report of the Mosaic GPU kernels on the default Hopper
path, per kernel: registers, spill bytes, and whether ptxas serialized the
wgmmas (its "Potential Performance Loss" notes: C7512, for want of
registers; C7513, an instruction other than a wgmma writing a wgmma's input
registers while it is in flight.  Each wgmma then waits for the one before:
H100 run 112, 2026-11-24, the three-consumer d128 forward with ALiBi, 337
TFLOP/s against 672 without ALiBi; H200 2026-11-29, the fp8 forward with
the softmax overlap before its P was packed after the P V wait, 0.68 -> 0.81
of cuDNN fp8).  GPU only (ptxas runs when Mosaic GPU compiles a kernel, with
``MOSAIC_GPU_DUMP_PTXAS=1``).  ``--check`` exits 1 on a serialized kernel
or a cell that did not compile (tests/test_ptxas.py, in .ci/gpu).

Each cell (``benchmarks.workloads.Workload``: head dim, causal, sequence
length, feature) compiles and runs ``jax.grad`` of ``flash_attention`` once,
in a process of its own (ptxas prints to the process's output), so the
forward and every backward kernel of its default configs are reported (fp8:
e4m3 inputs, the forward alone); the configs depend on the sequence length,
the cost of a compile does not.
Each ``--variant`` (``bwd_bench``'s syntax: backward config fields, forward
ones written ``fwd.``) compiles every cell again with the default configs
changed by those fields (``with_variant``), as row "cell [variant]".

  PYTHONPATH=$PWD python3 -m tools.ptxas_report [--head-dims 64,128]
      [--seqlens 4096,16384] [--features plain,dropout,alibi,bias,fp8]
      [--out FILE] [--variant dkdv_registers=232 ...] [--check]

Prints a table last: one row per (cell, kernel).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import os
import re
import subprocess
import sys

if __name__ == "__main__":  # a run and its children, never an importer: the
  # dump also puts JAX's counter back into every module's bytes
  # (mosaic/kernel_names.py), so equal kernels would compile twice
  os.environ["MOSAIC_GPU_DUMP_PTXAS"] = "1"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from benchmarks.bwd_bench import split_variant  # noqa: E402
from benchmarks.mosaic_bench import parse_variant  # noqa: E402
from benchmarks.workloads import Workload  # noqa: E402
import pallas_flash as pf  # noqa: E402
from pallas_flash.mosaic.config import (  # noqa: E402
    MosaicBackwardConfig, MosaicConfig)

FEATURES = {"plain": {}, "dropout": dict(dropout=0.1), "alibi": dict(alibi=True)}
# Not in the default --features: a [1, N, T, S] bf16 bias (the forward's
# bias ring, issue 50), which ``compile_cell`` passes beside the workload;
# fp8: float8_e4m3fn q, k, v (unit descales), the forward alone (issue 49).
EXTRA_FEATURES = {"bias": {}, "fp8": {}}
_MARK = "==== cell "


def cell(h: int, t: int, causal: bool, feature: str) -> Workload:
  """One sequence of 2 heads: small arrays, the default configs of T = S =
  t."""
  name = f"d{h} S{t // 1024}k {'C' if causal else 'N'} {feature}"
  dtype = "float8_e4m3fn" if feature == "fp8" else "bfloat16"
  return Workload(name=name, batch=1, seqlen=t, heads=2, kv_heads=2,
                  head_dim=h, causal=causal, dtype=dtype,
                  **{**FEATURES, **EXTRA_FEATURES}[feature])


def cell_of(spec: str) -> Workload:
  """``cell`` of a command-line spec 'H,T,C|N,feature'."""
  h, t, causal, feature = spec.split(",")
  return cell(int(h), int(t), causal == "C", feature)


def with_variant(text: str) -> None:
  """In this process, the default forward / backward configs
  (``MosaicConfig.default``, ``MosaicBackwardConfig.default``) come back
  with ``text``'s fields replaced, so every other choice of the dispatcher
  (which config for which head dim, mask, dropout, ALiBi) stays its own."""
  fwd_fields, bwd_fields = split_variant(parse_variant(text))
  for cls, fields in ((MosaicConfig, fwd_fields),
                      (MosaicBackwardConfig, bwd_fields)):
    if fields:
      default = cls.default  # (bound to cls)
      cls.default = classmethod(
          lambda _, *a, _default=default, _fields=fields, **kw:
          dataclasses.replace(_default(*a, **kw), **_fields))


def compile_cell(w: Workload):
  q, k, v, kw = w.inputs(0)
  if w.name.endswith(" bias"):
    kw["bias"] = jnp.zeros((1, w.heads, w.seqlen, w.kv_len), w.dtype)
  attention = lambda q, k, v: pf.flash_attention(
      q, k, v, implementation="mosaic", **kw)
  if w.name.endswith(" fp8"):  # forward only
    jax.block_until_ready(jax.jit(attention)(q, k, v))
    return
  loss = lambda q, k, v: attention(q, k, v).astype(jnp.float32).sum()
  jax.block_until_ready(jax.jit(jax.grad(loss, (0, 1, 2)))(q, k, v))


def parse(text: str) -> list[dict]:
  """Rows {cell, kernel, registers, spill_stores, spill_loads, serialized}
  from the output of ``main``'s compiles, each after its cell's marker.
  Each kernel is its own ptxas run: its warnings name it (and come before
  its 'Compiling entry function' line), its 'Used N registers' line follows
  that line."""
  rows, name, current = {}, None, None

  def row(kernel):
    kernel = kernel.replace("_mosaic_gpu_kernel", "")
    return rows.setdefault((name, kernel), dict(
        cell=name, kernel=kernel, registers=None, spill_stores=0,
        spill_loads=0, serialized=False))

  for line in text.splitlines():
    if line.startswith(_MARK):
      name, current = line[len(_MARK):].strip(), None
      continue
    named = re.search(r"function '(\w+)'", line)
    if named:
      current = row(named.group(1))
    if current is None:
      continue
    if "serialized" in line:
      current["serialized"] = True
    m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
    if m:
      current["spill_stores"], current["spill_loads"] = map(int, m.groups())
    m = re.search(r"Used (\d+) registers", line)
    if m:
      current["registers"] = int(m.group(1))
  return list(rows.values())


def table(rows: list[dict]) -> str:
  lines = ["| cell | kernel | registers | spill stores / loads (bytes) | "
           "wgmma serialized |", "|---|---|---|---|---|"]
  for r in rows:
    lines.append(f"| {r['cell']} | {r['kernel']} | {r['registers']} | "
                 f"{r['spill_stores']} / {r['spill_loads']} | "
                 f"{'**yes**' if r['serialized'] else 'no'} |")
  return "\n".join(lines)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--head-dims", default="64,128,256")
  ap.add_argument("--seqlens", default="4096,16384")
  ap.add_argument("--features", default=",".join(FEATURES))
  ap.add_argument("--jobs", type=int, default=4,
                  help="cells compiled at once (one process each)")
  ap.add_argument("--variant", action="append", default=[],
                  help="config fields, e.g. dkdv_registers=232 (repeatable)")
  ap.add_argument("--one", default="", help=argparse.SUPPRESS)  # H,T,C,F
  ap.add_argument("--one-variant", default="", help=argparse.SUPPRESS)
  ap.add_argument("--out", default="", help="also write the table here")
  ap.add_argument("--check", action="store_true",
                  help="exit 1 if a kernel's wgmmas are serialized or a "
                       "cell did not compile (the GPU suite's test)")
  args = ap.parse_args(argv)
  if jax.default_backend() != "gpu":
    sys.exit("ptxas_report needs a GPU (ptxas runs when Mosaic GPU compiles)")
  if args.one:  # a child: compile one cell; ptxas prints to this process
    if args.one_variant:
      with_variant(args.one_variant)
    compile_cell(cell_of(args.one))
    return
  specs = [(f"{h},{t},{c},{f}", v) for h in args.head_dims.split(",")
           for t in args.seqlens.split(",") for c in "NC"
           for f in args.features.split(",") for v in ["", *args.variant]]

  def child(spec_variant):  # each cell in its own process: its lines alone
    spec, variant = spec_variant
    # Several children share the GPU: none may preallocate most of it.
    env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    run = subprocess.run([sys.executable, "-m", "tools.ptxas_report",
                          "--one", spec, "--one-variant", variant],
                         capture_output=True, text=True, env=env)
    name = cell_of(spec).name + (f" [{variant}]" if variant else "")
    return name, run.returncode, f"{_MARK}{name}\n{run.stdout}\n{run.stderr}\n"

  with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
    done = list(pool.map(child, specs))
  text = "".join(out for _, _, out in done)
  failed = [name for name, rc, _ in done if rc != 0]
  for name, rc, out in done:
    if rc != 0:  # the child's last lines say why
      print(f"{name} failed:", *out.strip().splitlines()[-3:], sep="\n  ")
  rows = parse(text)
  out = table(rows)
  print(out)
  if failed:
    print("cells that did not compile:", ", ".join(failed))
  if args.out:
    with open(args.out, "w") as f:
      f.write(out + "\n")
  serialized = [f"{r['cell']} {r['kernel']}" for r in rows if r["serialized"]]
  if serialized:
    print("wgmmas serialized in:", ", ".join(serialized))
  if args.check and (failed or serialized or not rows):
    sys.exit(1)


if __name__ == "__main__":
  main()
