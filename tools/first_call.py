"""The CPU side of the first call on the default Hopper path, per benchmark
cell, on any machine (issue 50 item 2).

The first call of ``benchmarks.run`` (trace + lower + compile of the jitted
forward, then of the jitted forward+backward) is, on the host: tracing the
kernel bodies in Python, lowering them to Mosaic GPU modules, then XLA
compiling each module (MLIR -> LLVM -> PTX -> ptxas, inside the Mosaic GPU
custom call, which caches compiled kernels by ``kernel_hash``, the sha256 of
the module's bytecode *with* its source locations).  This tool times the
first two on a CPU (the kernels lowered for sm90 as ``tools.mosaic_modules``
does) and reports the module sizes, and whether the fwd+bwd program's
forward kernel has the forward program's hash (then XLA compiles it once;
``mosaic/lowering_cache.py`` lowers it once, so the fwd+bwd's per-kernel
line lists no forward lowering).

  PYTHONPATH=$PWD python3 -m tools.first_call            # issue 50's cells
  PYTHONPATH=$PWD python3 -m tools.first_call --cells d128_S4k_N --reps 3
  PYTHONPATH=$PWD python3 -m tools.first_call --profile d64_S4k_C

Each cell runs in a fresh process (``--reps`` times; the medians are
printed), after a warm-up call on a small cell, so one-time import and
JAX set-up costs do not count against the first cell.
"""
from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import subprocess
import sys
import time


def _cells():
  from benchmarks import workloads
  bf16 = ("bfloat16",)
  ws = (workloads.convention(seqlens=(4096, 16384), head_dims=(64, 128),
                             dtypes=bf16)
        + workloads.convention(seqlens=(1024, 4096), head_dims=(256,),
                               dtypes=bf16))
  return {f"d{w.head_dim}_S{w.seqlen // 1024}k_{'C' if w.causal else 'N'}": w
          for w in ws}


def lowered_for_hopper(fn, *specs):
  """(trace seconds, lower seconds, the Lowered) of jit(fn) for CUDA with the
  default Hopper dispatch on a machine without a GPU."""
  import jax

  from tools import mosaic_modules
  with mosaic_modules.as_on_hopper():
    t0 = time.perf_counter()
    traced = jax.jit(fn).trace(*specs)
    t1 = time.perf_counter()
    lowered = traced.lower(lowering_platforms=("cuda",))
    t2 = time.perf_counter()
  return t1 - t0, t2 - t1, lowered


def kernel_list(lowered) -> list[dict]:
  """Per Mosaic GPU custom call of the lowered program: kernel name,
  kernel_hash (hex, as XLA's compile cache keys it), module bytes (the
  bytecode XLA compiles) and characters / ops of its text without
  locations."""
  from tools import mosaic_modules
  out = []
  for k in mosaic_modules.kernel_calls(lowered.as_text(debug_info=False)):
    name = k["name"].removeprefix("pallas_flash_mosaic_").removesuffix(
        "_mosaic_gpu")
    out.append(dict(name=name, hash=k["kernel_hash"].hex()[:12],
                    bytes=len(k["raw"]), chars=len(k["text"]),
                    ops=k["text"].count("\n")))
  return out


def measure(w, times: _KernelTimes | None = None) -> dict:
  """Trace / lower seconds and kernels of the forward and the fwd+bwd of
  ``benchmarks.run`` (jit of flash_attention; jit of jax.vjp of it with the
  output and the three gradients returned) for workload ``w``."""
  import jax
  import jax.numpy as jnp

  import pallas_flash as pf
  dtype = jnp.dtype(w.dtype)
  q = jax.ShapeDtypeStruct((w.batch, w.seqlen, w.heads, w.head_dim), dtype)
  kv = jax.ShapeDtypeStruct((w.batch, w.kv_len, w.kv_heads, w.head_dim),
                            dtype)

  def fwd(q, k, v):
    return pf.flash_attention(q, k, v, is_causal=w.causal)

  def fwdbwd(q, k, v, do):
    out, vjp = jax.vjp(fwd, q, k, v)
    return (out,) + tuple(vjp(do))

  r = {}
  for mode, fn, specs in (("fwd", fwd, (q, kv, kv)),
                          ("fwdbwd", fwdbwd, (q, kv, kv, q))):
    t_trace, t_lower, lowered = lowered_for_hopper(fn, *specs)
    r[mode] = dict(trace_s=t_trace, lower_s=t_lower,
                   per_kernel=times.take() if times else [],
                   kernels=kernel_list(lowered))
  return r


class _KernelTimes:
  """Seconds per kernel: tracing its body (the call of the function that
  ``plgpu.kernel`` returns), Pallas's lowering of its jaxpr to a Mosaic GPU
  module (``lower_jaxpr_to_module``) and, inside that, Mosaic GPU's Python
  passes (``lower_mgpu_module``: layout inference, dialect lowering)."""

  def __init__(self):
    self.records = []

  def __enter__(self):
    from unittest import mock

    import jax.experimental.pallas.mosaic_gpu as plgpu
    from jax._src.pallas.mosaic_gpu import lowering
    from jax.experimental.mosaic.gpu import core as mgpu_core
    rec = self.records
    kernel, lower, passes = (plgpu.kernel, lowering.lower_jaxpr_to_module,
                             mgpu_core.lower_mgpu_module)

    def timed_kernel(body, **kw):
      call = kernel(body, **kw)
      def run(*a):
        t0 = time.perf_counter()
        out = call(*a)
        rec.append(("trace", body.__name__, time.perf_counter() - t0))
        return out
      return run

    def timed_lower(*a, **kw):
      t0 = time.perf_counter()
      out = lower(*a, **kw)
      name = out.module.operation.attributes["sym_name"].value
      rec.append(("lower", name, time.perf_counter() - t0))
      return out

    def timed_passes(*a, **kw):
      t0 = time.perf_counter()
      out = passes(*a, **kw)
      rec.append(("passes", "", time.perf_counter() - t0))
      return out

    self._patches = [mock.patch.object(plgpu, "kernel", timed_kernel),
                     mock.patch.object(lowering, "lower_jaxpr_to_module",
                                       timed_lower),
                     mock.patch.object(mgpu_core, "lower_mgpu_module",
                                       timed_passes)]
    for p in self._patches:
      p.start()
    return self

  def __exit__(self, *exc):
    for p in self._patches:
      p.stop()

  def take(self) -> list:
    """[(kind, kernel name, seconds)] since the last take; a "passes" entry
    is folded into the "lower" entry after it as a third number."""
    out, passes = [], 0.0
    for kind, name, s in self.records:
      if kind == "passes":
        passes = s
        continue
      name = name.removeprefix("pallas_flash_mosaic_").removesuffix(
          "_mosaic_gpu")
      out.append((kind, name, round(s, 4), round(passes, 4))
                 if kind == "lower" else (kind, name, round(s, 4)))
    self.records.clear()
    return out


def _child(name: str, profile: str | None):
  from tools import mosaic_modules
  cells = _cells()
  # Warm-up: JAX's and Pallas's one-time costs (imports, rule tables).
  mosaic_modules.lower_cell(64, False, 0.0, b=1, t=256)
  if profile:
    prof = cProfile.Profile()
    prof.enable()
  with _KernelTimes() as times:
    r = measure(cells[name], times)
  if profile:
    prof.disable()
    prof.dump_stats(profile)
  print("RESULT " + json.dumps(r), flush=True)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--cells", nargs="*", default=None,
                  help="cell names (d64_S4k_N ...); default: all")
  ap.add_argument("--reps", type=int, default=1)
  ap.add_argument("--profile", default=None,
                  help="one cell: write cProfile stats to /tmp/<cell>.prof "
                       "and print the top functions")
  ap.add_argument("--json", default=None, help="write the results here")
  ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
  ap.add_argument("--child-profile", default=None, help=argparse.SUPPRESS)
  args = ap.parse_args(argv)
  if args.child:
    return _child(args.child, args.child_profile)
  names = list(_cells())
  if args.profile:
    names, args.reps = [args.profile], 1
  elif args.cells:
    names = args.cells
  env = dict(os.environ, PYTHONPATH=os.getcwd())
  results = {}
  for name in names:
    runs = []
    for _ in range(args.reps):
      cmd = [sys.executable, "-m", "tools.first_call", "--child", name]
      if args.profile:
        cmd += ["--child-profile", f"/tmp/{name}.prof"]
      res = subprocess.run(cmd, env=env, capture_output=True, text=True)
      line = [x for x in res.stdout.splitlines() if x.startswith("RESULT ")]
      if not line:
        sys.exit(f"{name}: child failed\n{res.stderr[-3000:]}")
      runs.append(json.loads(line[0][7:]))
    med = lambda mode, key: statistics.median(r[mode][key] for r in runs)
    r = runs[0]
    fwd_hashes = {k["hash"] for k in r["fwd"]["kernels"]}
    shared = [k["name"] for k in r["fwdbwd"]["kernels"]
              if k["hash"] in fwd_hashes]
    def per_kernel(mode):  # element-wise medians over the reps
      rows = [x[mode]["per_kernel"] for x in runs]
      return [[*row[:2], *(statistics.median(rr[i][j] for rr in rows)
                           for j in range(2, len(row)))]
              for i, row in enumerate(rows[0])]
    row = dict(
        per_kernel={m: per_kernel(m) for m in ("fwd", "fwdbwd")},
        fwd_trace_s=med("fwd", "trace_s"), fwd_lower_s=med("fwd", "lower_s"),
        fwdbwd_trace_s=med("fwdbwd", "trace_s"),
        fwdbwd_lower_s=med("fwdbwd", "lower_s"),
        kernels={m: r[m]["kernels"] for m in ("fwd", "fwdbwd")},
        fwd_kernel_cached_in_fwdbwd=bool(shared), reps=args.reps,
        all_s={m: [(x[m]["trace_s"], x[m]["lower_s"]) for x in runs]
               for m in ("fwd", "fwdbwd")})
    results[name] = row
    ks = ", ".join(f"{k['name']} {k['chars'] / 1e6:.2f}M/{k['ops'] // 1000}k"
                   for k in r["fwdbwd"]["kernels"])
    print(f"{name:12s} fwd {row['fwd_trace_s']:.2f}+{row['fwd_lower_s']:.2f}s"
          f"  fwd+bwd {row['fwdbwd_trace_s']:.2f}+{row['fwdbwd_lower_s']:.2f}s"
          f"  (trace+lower, median of {args.reps})  fwd kernel hash "
          f"{'shared' if shared else 'NOT shared'} with fwd+bwd  [{ks}]",
          flush=True)
    for m in ("fwd", "fwdbwd"):
      print(f"  {m:7s}" + "; ".join(
          f"{k[0]} {k[1]} {k[2]:.2f}" + (f" (passes {k[3]:.2f})"
                                         if k[0] == "lower" else "")
          for k in row["per_kernel"][m]), flush=True)
  if args.profile:
    stats = pstats.Stats(f"/tmp/{names[0]}.prof")
    stats.sort_stats("cumulative").print_stats(40)
    stats.sort_stats("tottime").print_stats(30)
  if args.json:
    with open(args.json, "w") as f:
      json.dump(results, f, indent=1)
  return results


if __name__ == "__main__":
  main()
