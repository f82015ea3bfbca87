"""Benchmark pallas_flash against its peers: ``python -m benchmarks.run``.

For every workload (``benchmarks.workloads``) and every implementation
(``benchmarks.peers``), in one process on the same inputs:

1. build it (``NotImplementedError`` and any other failure -> "did not run:
   <reason>"); trace + lower + compile the jitted forward and the jitted
   forward+backward (``jax.vjp``; it returns the output too, so that no part
   of the forward is dead code), timing that first-call cost;
2. check the forward output and dq, dk, dv against the float32 reference
   (``pallas_flash.reference`` through ``implementation="xla"``, HIGHEST
   precision) on batch 0, kv head 0 and the query heads that read it, at the
   full sequence length: ``|x - ref| / |ref|`` (Frobenius) under the per-dtype
   tolerance.  A wrong result is reported and not timed;
3. time it: warm-up, then ``--reps`` samples, each a back-to-back burst of
   calls ending in ``jax.block_until_ready`` long enough (>= ``--sample-ms``)
   that dispatch overhead is amortised; the median of the per-call times.
   Backward = median(fwd+bwd) - median(fwd).  TFLOP/s: forward FLOPs
   4*B*N*T*S*H (x0.5 causal), backward 2.5x, fwd+bwd 3.5x;
4. peak memory of fwd+bwd from ``compiled.memory_analysis()`` (argument +
   output + temp - alias bytes: what XLA allocates for the step, known before
   it runs, so cells that would not fit are reported instead of run).

Then a memory sweep (fwd+bwd compiled, not run, T up to 128k) and the
outputs in ``--out``: ``results.json``, ``table.md``, ``RESULTS.md``,
``tflops.png``, ``memory.png``.

On a machine without a GPU the same command runs a small smoke version (tiny
shapes, Pallas interpret mode) and says so: its numbers are not performance.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
import traceback

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import peers as peers_lib
from benchmarks import workloads as wl

MODES = ("fwd", "bwd", "fwdbwd")
MODE_TITLE = {"fwd": "forward", "bwd": "backward (fwd+bwd minus fwd)",
              "fwdbwd": "forward + backward"}
# ||x - ref|| / ||ref|| limits.  bf16 keeps 8 mantissa bits (2^-9 = 2e-3 per
# element after rounding the output; P is rounded to bf16 before P @ V).
FWD_TOL = {"bfloat16": 2e-2, "float16": 5e-3, "float32": 1e-3}
BWD_TOL = {"bfloat16": 5e-2, "float16": 1e-2, "float32": 2e-3}


def _reason(e: BaseException) -> str:
  msg = str(e).strip().splitlines()
  msg = msg[0] if msg else ""
  if len(msg) > 220:
    msg = msg[:217] + "..."
  return f"{type(e).__name__}: {msg}" if msg else type(e).__name__


# ----------------------------------------------------------------- arguments


def parse_args(argv=None):
  p = argparse.ArgumentParser(
      prog="python -m benchmarks.run",
      description="Time pallas_flash and its peers (see the module docstring).")
  p.add_argument("--quick", action="store_true",
                 help="bf16, d64/d128, T=4096 (+ real-model shapes, a short "
                      "memory sweep): a few minutes on one GPU")
  p.add_argument("--dtype", nargs="+", choices=("bf16", "fp16"), default=None)
  p.add_argument("--head-dims", nargs="+", type=int, default=None)
  p.add_argument("--seqlens", nargs="+", type=int, default=None)
  p.add_argument("--causal", choices=("both", "yes", "no"), default="both")
  p.add_argument("--workloads", nargs="+", default=None,
                 choices=("convention", "gqa", "packed", "padded", "memory"),
                 help="which workload groups (default: all)")
  p.add_argument("--match", nargs="+", default=None,
                 help="keep only cells whose label contains one of these "
                      "substrings, e.g. --match bf16 'fp16 d128 S4k'")
  p.add_argument("--impls", nargs="+", default=None,
                 choices=tuple(peers_lib.IMPLS),
                 help="implementations to run (default: all)")
  p.add_argument("--skip-impls", nargs="+", default=(),
                 choices=tuple(peers_lib.IMPLS))
  p.add_argument("--only", choices=("fwd", "all"), default="all",
                 help="'fwd' times the forward only")
  p.add_argument("--memory-seqlens", nargs="+", type=int, default=None)
  p.add_argument("--xla-max-seqlen", type=int, default=16384,
                 help="do not time the O(T^2) XLA path above this T")
  p.add_argument("--reps", type=int, default=None, help="timed samples (median)")
  p.add_argument("--sample-ms", type=float, default=None,
                 help="minimum length of one timed sample")
  p.add_argument("--time-budget", type=float, default=None,
                 help="seconds; cells not started by then are reported as not run")
  p.add_argument("--no-check", action="store_true",
                 help="skip the reference check (not recommended)")
  p.add_argument("--no-plots", action="store_true")
  p.add_argument("--smoke", action="store_true",
                 help="force the small smoke version (what a CPU-only machine runs)")
  p.add_argument("--out", default=None,
                 help="results folder (default benchmarks/results/<device>_<date>; "
                      "without a GPU, $TMPDIR/pallas_flash_bench_smoke)")
  return p.parse_args(argv)


def select_workloads(args, smoke: bool):
  dtypes = tuple({"bf16": "bfloat16", "fp16": "float16"}[d]
                 for d in (args.dtype or (("bf16",) if (args.quick or smoke)
                                          else ("bf16", "fp16"))))
  causals = {"both": (False, True), "yes": (True,), "no": (False,)}[args.causal]
  groups = set(args.workloads or ("convention", "gqa", "packed", "padded", "memory"))
  if smoke:
    head_dims = tuple(args.head_dims or (32,))
    seqlens = tuple(args.seqlens or (128, 256))
    if args.causal == "both":  # the gqa/packed smoke cells are causal
      causals = (False,)
    conv = wl.convention(seqlens=seqlens, head_dims=head_dims, causals=causals,
                         dtypes=dtypes, tokens=256, hidden=64)
    real = wl.real_models(dtypes=dtypes[:1], scale=16)
    mem_seqlens = tuple(args.memory_seqlens or (128, 256, 512))
    mem = wl.memory_sweep(seqlens=mem_seqlens, head_dim=32, heads=2,
                          dtype=dtypes[0])
  else:
    head_dims = tuple(args.head_dims or ((64, 128) if args.quick else wl.HEAD_DIMS))
    seqlens = tuple(args.seqlens or ((4096,) if args.quick else wl.SEQLENS))
    conv = wl.convention(seqlens=seqlens, head_dims=head_dims, causals=causals,
                         dtypes=dtypes)
    real = wl.real_models(dtypes=dtypes[:1])
    mem_seqlens = tuple(args.memory_seqlens or (
        (4096, 32768, 131072) if args.quick
        else (1024, 4096, 16384, 32768, 65536, 131072)))
    mem = wl.memory_sweep(seqlens=mem_seqlens, dtype=dtypes[0])
  cells = [w for w in conv if "convention" in groups]
  cells += [w for w in real if w.name in groups]
  if args.match:
    cells = [w for w in cells if any(m in w.label for m in args.match)]
  # The first dtype's cells first, so a time budget cuts the other dtype.
  cells.sort(key=lambda w: w.dtype != dtypes[0])
  mem = mem if "memory" in groups else []
  return cells, mem


# ----------------------------------------------------------------- measuring


def rel_err(x, ref, rows=None) -> float:
  """||x - ref|| / ||ref|| over the rows where ``rows`` ([T] bool) is True."""
  x = jnp.asarray(x, jnp.float32)
  ref = jnp.asarray(ref, jnp.float32)
  if rows is not None:
    m = rows.reshape((1, -1) + (1,) * (x.ndim - 2))
    x, ref = jnp.where(m, x, 0.0), jnp.where(m, ref, 0.0)
  if not bool(jnp.all(jnp.isfinite(x))):
    return float("inf")
  den = float(jnp.linalg.norm(ref))
  return float(jnp.linalg.norm(x - ref)) / max(den, 1e-30)


class Reference:
  """float32 reference on batch 0, kv head 0 and its query heads, full T."""

  def __init__(self, w: wl.Workload, x: wl.Inputs):
    self.w, self.x = w, x
    self.group = w.heads // w.kv_heads
    self._cache = {}
    t = w.seqlen
    if x.q_lengths is not None:
      self.q_rows = jnp.arange(t) < x.q_lengths[0]
      self.kv_rows = jnp.arange(t) < x.kv_lengths[0]
    else:
      self.q_rows = self.kv_rows = None

  def slice_q(self, a):
    return a[:1, :, :self.group]

  def slice_kv(self, a):
    return a[:1, :, :1]

  def get(self, scale: float):
    if scale not in self._cache:
      from pallas_flash import flash_attention
      w, x = self.w, self.x
      seg = None if x.segment_ids is None else x.segment_ids[:1]
      ql = None if x.q_lengths is None else x.q_lengths[:1]
      kl = None if x.kv_lengths is None else x.kv_lengths[:1]

      @jax.jit
      def ref(q, k, v, do):
        f = lambda q, k, v: flash_attention(
            q, k, v, scale=scale, is_causal=w.causal, implementation="xla",
            query_segment_ids=seg, query_seq_lengths=ql,
            key_value_seq_lengths=kl)
        out, vjp = jax.vjp(f, q, k, v)
        return (out,) + tuple(vjp(do))

      f32 = lambda a: a.astype(jnp.float32)
      self._cache[scale] = jax.block_until_ready(ref(
          f32(self.slice_q(x.q)), f32(self.slice_kv(x.k)),
          f32(self.slice_kv(x.v)), f32(self.slice_q(x.do))))
    return self._cache[scale]


def time_calls(f, args, reps: int, sample_s: float):
  """Median seconds per call of compiled ``f`` (already warm) and the spread."""
  return time_interleaved({"f": (f, args)}, reps, sample_s)["f"]


def time_interleaved(calls: dict, reps: int, sample_s: float):
  """{name: (median s per call, spread, calls per burst)} for warm ``calls``
  ({name: (f, args)}).  Each rep times one burst of back-to-back calls of
  every entry, the entries in a fresh (seeded) random order each rep, so that
  neither clock or thermal drift nor the kernel that ran just before (its
  power draw, what it left in L2) falls on one entry more than another."""
  bursts = {}
  for name, (f, args) in calls.items():
    single = math.inf  # fastest of 3 single calls: the first may still
    for _ in range(3):  # allocate memory or load code
      t0 = time.perf_counter()
      jax.block_until_ready(f(*args))
      single = min(single, time.perf_counter() - t0)
    bursts[name] = int(max(1, min(2000, math.ceil(sample_s / max(single, 1e-7)))))
  samples = {name: [] for name in calls}
  names = list(calls)
  rng = np.random.default_rng(0)
  for _ in range(reps):
    for name in rng.permutation(names):
      f, args = calls[name]
      n = bursts[name]
      t0 = time.perf_counter()
      for _ in range(n):
        out = f(*args)
      jax.block_until_ready(out)
      samples[name].append((time.perf_counter() - t0) / n)
      del out
  result = {}
  for name, xs in samples.items():
    med = float(np.median(xs))
    spread = float((np.max(xs) - np.min(xs)) / med) if med > 0 else 0.0
    result[name] = (med, spread, bursts[name])
  return result


def _mem_bytes(compiled) -> int | None:
  try:
    m = compiled.memory_analysis()
    return int(m.argument_size_in_bytes + m.output_size_in_bytes
               + m.temp_size_in_bytes - m.alias_size_in_bytes)
  except Exception:
    return None


def _temp_bytes(compiled) -> int | None:
  try:
    m = compiled.memory_analysis()
    return int(m.temp_size_in_bytes + m.output_size_in_bytes)
  except Exception:
    return None


def _free_device_bytes() -> int | None:
  try:
    stats = jax.devices()[0].memory_stats()
    return int(stats["bytes_limit"] - stats["bytes_in_use"])
  except Exception:
    return None


def _make_fwdbwd(fn):
  def fwdbwd(q, k, v, aux, do):
    out, vjp = jax.vjp(lambda q, k, v: fn(q, k, v, aux), q, k, v)
    return (out,) + tuple(vjp(do))
  return fwdbwd


def _compile(f, *args, options=None):
  t0 = time.perf_counter()
  compiled = jax.jit(f).lower(*args).compile(options)
  return compiled, time.perf_counter() - t0


# The memory sweep only compiles.  XLA's GEMM autotuner would run the O(T^2)
# path's fusions to pick tile configs and fails when they need more than the
# device holds (1 TiB at T = 128k); without autotuning it still compiles and
# reports the buffer sizes.
_MEMORY_SWEEP_OPTIONS = {"xla_gpu_autotune_level": 0}


def bench_cell(w: wl.Workload, impls, args, settings, log) -> list[dict]:
  x = wl.make_inputs(w)
  ref = None if args.no_check else Reference(w, x)
  fwd_tol, bwd_tol = FWD_TOL[w.dtype], BWD_TOL[w.dtype]
  results = []
  for impl in impls:
    r = dict(impl=impl.name, ours=impl.ours, label=w.label,
             workload=dataclasses.asdict(w), visible_pairs=x.visible_pairs,
             status_fwd="not run", status_bwd="not run")
    results.append(r)
    t_cell = time.perf_counter()
    try:
      if impl.name == "xla" and w.seqlen > args.xla_max_seqlen:
        raise NotImplementedError(f"T={w.seqlen} > --xla-max-seqlen "
                                  f"{args.xla_max_seqlen} (O(T^2) path)")
      fn, aux = impl.build(w, x)
    except Exception as e:
      r["status_fwd"] = r["status_bwd"] = f"did not run: {_reason(e)}"
      log(f"  {impl.name:15s} did not run: {_reason(e)}")
      continue

    scale = impl.ref_scale(w)
    # ---- forward
    fwd_ok = False
    cf = cb = None
    try:
      cf, r["compile_fwd_s"] = _compile(fn, x.q, x.k, x.v, aux)
      r["mem_fwd_bytes"] = _mem_bytes(cf)
      need, free = _temp_bytes(cf), _free_device_bytes()
      if need is not None and free is not None and need > free:
        raise MemoryError(f"needs {need / 2**30:.1f} GiB (memory_analysis) > "
                          f"{free / 2**30:.1f} GiB free")
      out = jax.block_until_ready(cf(x.q, x.k, x.v, aux))
      if ref is not None:
        e = rel_err(ref.slice_q(out), ref.get(scale)[0], ref.q_rows)
        r["err_fwd"] = e
        if not e <= fwd_tol:
          r["status_fwd"] = f"wrong: fwd rel err {e:.2e} > {fwd_tol:g}"
          r["status_bwd"] = "not timed: forward wrong"
          log(f"  {impl.name:15s} {r['status_fwd']}")
          continue
      del out
      med, spread, n = time_calls(cf, (x.q, x.k, x.v, aux), settings["reps"],
                                  settings["sample_s"])
      r.update(t_fwd_s=med, spread_fwd=spread, calls_per_sample_fwd=n,
               status_fwd="ok")
      r["tflops_fwd"] = wl.flops(w, x.visible_pairs, "fwd") / med / 1e12
      fwd_ok = True
    except Exception as e:
      r["status_fwd"] = f"did not run: {_reason(e)}"
      if settings["verbose"]:
        traceback.print_exc()
    cf = None  # drop the executable before compiling the next one
    # ---- forward + backward
    if args.only == "fwd":
      r["status_bwd"] = "skipped (--only fwd)"
    else:
      try:
        cb, r["compile_fwdbwd_s"] = _compile(_make_fwdbwd(fn), x.q, x.k, x.v,
                                             aux, x.do)
        r["mem_fwdbwd_bytes"] = _mem_bytes(cb)
        need, free = _temp_bytes(cb), _free_device_bytes()
        if need is not None and free is not None and need > free:
          raise MemoryError(f"needs {need / 2**30:.1f} GiB (memory_analysis) > "
                            f"{free / 2**30:.1f} GiB free")
        outs = jax.block_until_ready(cb(x.q, x.k, x.v, aux, x.do))
        wrong = None
        if ref is not None:
          _, dq_r, dk_r, dv_r = ref.get(scale)
          errs = dict(
              dq=rel_err(ref.slice_q(outs[1]), dq_r, ref.q_rows),
              dk=rel_err(ref.slice_kv(outs[2]), dk_r, ref.kv_rows),
              dv=rel_err(ref.slice_kv(outs[3]), dv_r, ref.kv_rows))
          r["err_bwd"] = max(errs.values())
          r["err_bwd_parts"] = errs
          bad = {k: v for k, v in errs.items() if not v <= bwd_tol}
          if bad:
            wrong = "wrong: " + ", ".join(f"{k} rel err {v:.2e}" for k, v in bad.items()) \
                + f" > {bwd_tol:g}"
        del outs
        if wrong:
          r["status_bwd"] = wrong
        else:
          med, spread, n = time_calls(cb, (x.q, x.k, x.v, aux, x.do),
                                      settings["reps"], settings["sample_s"])
          r.update(t_fwdbwd_s=med, spread_fwdbwd=spread, calls_per_sample_fwdbwd=n)
          r["tflops_fwdbwd"] = wl.flops(w, x.visible_pairs, "fwdbwd") / med / 1e12
          if fwd_ok:
            t_bwd = med - r["t_fwd_s"]
            r["t_bwd_s"] = t_bwd
            if t_bwd > 0:
              r["tflops_bwd"] = wl.flops(w, x.visible_pairs, "bwd") / t_bwd / 1e12
              r["status_bwd"] = "ok"
            else:
              r["status_bwd"] = "ok (fwd+bwd <= fwd: noise)"
          else:
            r["status_bwd"] = "fwd+bwd only (forward did not run alone)"
        cb = None
      except Exception as e:
        r["status_bwd"] = f"did not run: {_reason(e)}"
        if settings["verbose"]:
          traceback.print_exc()
    log("  " + _summary_line(r) + f"   [{time.perf_counter() - t_cell:.1f}s]")
  return results


def _summary_line(r) -> str:
  def f(key):
    v = r.get(key)
    return f"{v:6.1f}" if isinstance(v, float) else "     -"
  s = (f"{r['impl']:15s} fwd {f('tflops_fwd')} bwd {f('tflops_bwd')} "
       f"fwd+bwd {f('tflops_fwdbwd')} TFLOP/s")
  if r.get("t_fwd_s"):
    s += f"  fwd {r['t_fwd_s'] * 1e3:.3f} ms"
  if r.get("t_fwdbwd_s"):
    s += f"  fwd+bwd {r['t_fwdbwd_s'] * 1e3:.3f} ms"
  if "err_fwd" in r:
    s += f"  err fwd {r['err_fwd']:.1e}"
  if "err_bwd" in r:
    s += f" bwd {r['err_bwd']:.1e}"
  for key in ("status_fwd", "status_bwd"):
    if not str(r[key]).startswith("ok") and "skipped" not in str(r[key]):
      s += f"\n  {'':15s} {key[7:]}: {r[key]}"
  return s


def memory_sweep(mem_workloads, impls, args, log) -> list[dict]:
  """Compile (never run) fwd+bwd at growing T; memory_analysis bytes."""
  rows = []
  on_gpu = peers_lib.on_gpu()
  for w in mem_workloads:
    dt = jnp.dtype(w.dtype)
    sd = lambda shape: jax.ShapeDtypeStruct(shape, dt)
    b, t, n, kh, h = w.batch, w.seqlen, w.heads, w.kv_heads, w.head_dim
    x = wl.Inputs(q=sd((b, t, n, h)), k=sd((b, t, kh, h)), v=sd((b, t, kh, h)),
                  do=sd((b, t, n, h)))
    for impl in impls:
      r = dict(impl=impl.name, ours=impl.ours, seqlen=t,
               workload=dataclasses.asdict(w))
      rows.append(r)
      try:
        fn, aux = impl.build(w, x)
        c, r["compile_s"] = _compile(
            _make_fwdbwd(fn), x.q, x.k, x.v, aux, x.do,
            options=_MEMORY_SWEEP_OPTIONS if on_gpu else None)
        r["bytes"] = _mem_bytes(c)
        r["status"] = "ok" if r["bytes"] is not None else "no memory_analysis"
        del c
      except Exception as e:
        r["status"] = f"did not run: {_reason(e)}"
      gib = f"{r['bytes'] / 2**30:9.3f} GiB" if r.get("bytes") else r["status"]
      log(f"  memory T={t:6d} {impl.name:15s} {gib}")
  return rows


# ----------------------------------------------------------------- reporting


def _num(v: float) -> str:
  """TFLOP/s for a table: integers on a GPU, significant digits on a CPU."""
  return f"{v:.0f}" if v >= 100 else (f"{v:.1f}" if v >= 1 else f"{v:.2g}")


def _cell_text(r, mode, best_peer):
  status = r["status_fwd"] if mode == "fwd" else r["status_bwd"]
  key = f"tflops_{mode}"
  if key in r and (mode != "bwd" or str(status).startswith("ok")):
    v = r[key]
    if best_peer:
      return f"{_num(v)} ({v / best_peer:.2f})"
    return _num(v)
  if str(status).startswith("wrong"):
    return "wrong"
  if str(status).startswith("skipped"):
    return "skip"
  return "-"


def _timed(r, mode) -> float | None:
  """TFLOP/s of ``r`` in ``mode`` if it was timed and is valid, else None."""
  v = r.get(f"tflops_{mode}")
  if mode == "bwd" and not str(r["status_bwd"]).startswith("ok"):
    return None
  return v or None


def _best_peer(rs, mode):
  vals = [(_timed(r, mode), r["impl"]) for r in rs if not r["ours"]]
  vals = [v for v in vals if v[0]]
  return max(vals) if vals else (None, None)


def tables(results, impl_names, modes) -> str:
  labels = list(dict.fromkeys(r["label"] for r in results))
  by = {(r["label"], r["impl"]): r for r in results}
  cols = [n for n in impl_names if any((l, n) in by for l in labels)]
  out = []
  for mode in modes:
    out.append(f"### TFLOP/s, {MODE_TITLE[mode]} (ratio to the best peer in the row)\n")
    out.append("| workload | " + " | ".join(cols) + " | best peer |")
    out.append("|---|" + "---|" * (len(cols) + 1))
    for l in labels:
      rs = [by[(l, n)] for n in cols if (l, n) in by]
      best, best_name = _best_peer(rs, mode)
      cells = [_cell_text(by[(l, n)], mode, best) if (l, n) in by else ""
               for n in cols]
      out.append(f"| {l} | " + " | ".join(cells) + f" | {best_name or '-'} |")
    out.append("")
  return "\n".join(out)


def headline(results, impl_names) -> str:
  ours = [n for n in impl_names if peers_lib.IMPLS[n].ours]
  labels = list(dict.fromkeys(r["label"] for r in results))
  by = {(r["label"], r["impl"]): r for r in results}
  out = ["| workload | impl | fwd TFLOP/s | best peer fwd | ratio | bwd TFLOP/s | "
         "best peer bwd | ratio |", "|---|---|---|---|---|---|---|---|"]
  for l in labels:
    rs = [r for r in results if r["label"] == l]
    bf, bfn = _best_peer(rs, "fwd")
    bb, bbn = _best_peer(rs, "bwd")
    for n in ours:
      r = by.get((l, n))
      if r is None:
        continue
      f = r.get("tflops_fwd")
      b = r.get("tflops_bwd") if str(r["status_bwd"]).startswith("ok") else None
      fs = _num(f) if f else _short(r["status_fwd"])
      bs = _num(b) if b else _short(r["status_bwd"])
      out.append(
          f"| {l} | {n} | {fs} | {f'{_num(bf)} {bfn}' if bf else '-'} | "
          f"{f'**{f / bf:.2f}**' if f and bf else '-'} | {bs} | "
          f"{f'{_num(bb)} {bbn}' if bb else '-'} | "
          f"{f'**{b / bb:.2f}**' if b and bb else '-'} |")
  return "\n".join(out)


def _short(status: str) -> str:
  s = str(status)
  return "wrong" if s.startswith("wrong") else ("skip" if "skipped" in s else "did not run")


def reasons(results, mem_rows) -> str:
  """Which implementations ran, and why the others did not, per impl."""
  impl_names = list(dict.fromkeys([r["impl"] for r in results] +
                                  [r["impl"] for r in mem_rows]))
  lines = []
  for n in impl_names:
    rs = [r for r in results if r["impl"] == n]
    ok = sum(1 for r in rs if r["status_fwd"] == "ok")
    okb = sum(1 for r in rs if str(r["status_bwd"]).startswith("ok"))
    why = {}
    for r in rs:
      f, b = str(r["status_fwd"]), str(r["status_bwd"])
      bad = lambda s: not s.startswith(("ok", "not timed", "skipped"))
      items = ([f] if bad(f) else []) if f == b else (
          [f"fwd: {f}"] * bad(f) + [f"bwd: {b}"] * bad(b))
      for s in items:
        why.setdefault(s, []).append(r["label"])
    ran = "ran" if ok or okb else "did not run"
    lines.append(f"- **{n}** ({peers_lib.IMPLS[n].note}): {ran}; forward timed "
                 f"in {ok}/{len(rs)} cells, backward in {okb}/{len(rs)}.")
    for s, labels in why.items():
      where = ", ".join(labels[:3]) + (f" and {len(labels) - 3} more" if len(labels) > 3 else "")
      lines.append(f"  - {s} ({where})")
  return "\n".join(lines)


def compile_table(results, impl_names) -> str:
  labels = list(dict.fromkeys(r["label"] for r in results))
  by = {(r["label"], r["impl"]): r for r in results}
  cols = [n for n in impl_names if any((l, n) in by for l in labels)]
  out = ["| workload | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
  for l in labels:
    cells = []
    for n in cols:
      r = by.get((l, n), {})
      a, b = r.get("compile_fwd_s"), r.get("compile_fwdbwd_s")
      cells.append(f"{a:.1f} / {b:.1f}" if a and b else (f"{a:.1f} / -" if a else "-"))
    out.append(f"| {l} | " + " | ".join(cells) + " |")
  return "\n".join(out)


def memory_table(mem_rows, device_bytes) -> str:
  if not mem_rows:
    return "(no memory sweep)"
  seqlens = sorted({r["seqlen"] for r in mem_rows})
  cols = list(dict.fromkeys(r["impl"] for r in mem_rows))
  by = {(r["seqlen"], r["impl"]): r for r in mem_rows}
  out = ["| T | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
  for t in seqlens:
    cells = []
    for n in cols:
      r = by.get((t, n), {})
      if r.get("bytes"):
        gib = r["bytes"] / 2**30
        over = " (does not fit)" if device_bytes and r["bytes"] > device_bytes else ""
        cells.append(f"{gib:.2f}{over}")
      else:
        cells.append("-")
    out.append(f"| {t} | " + " | ".join(cells) + " |")
  return "\n".join(out)


def plots(results, mem_rows, out_dir, modes, device_bytes, smoke) -> list[str]:
  try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
  except Exception as e:
    return [f"no plots: matplotlib not importable ({_reason(e)})"]
  written = []
  palette = plt.get_cmap("tab10").colors
  color = lambda n: palette[list(peers_lib.IMPLS).index(n) % len(palette)]
  suffix = " (CPU SMOKE RUN: not performance)" if smoke else ""
  configs = {}
  for r in results:
    w = wl.Workload(**r["workload"])
    configs.setdefault(w.config_key, (w.config_label, []))[1].append(r)
  # Curves for configs swept over seqlen; one bar panel per mode for the rest.
  curves = [v for v in configs.values()
            if len({r["workload"]["seqlen"] for r in v[1]}) > 1]
  singles = [r for v in configs.values() if v not in curves for r in v[1]]
  nrows = len(curves) + (1 if singles else 0)
  if nrows:
    fig, axes = plt.subplots(nrows, len(modes), squeeze=False,
                             figsize=(4.4 * len(modes), 3.1 * nrows))
    for i, (title, rs) in enumerate(curves):
      impls = list(dict.fromkeys(r["impl"] for r in rs))
      for j, mode in enumerate(modes):
        ax = axes[i][j]
        for n in impls:
          pts = sorted((r["workload"]["seqlen"], _timed(r, mode)) for r in rs
                       if r["impl"] == n and _timed(r, mode))
          if not pts:
            continue
          ours = peers_lib.IMPLS[n].ours
          ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                  lw=2.5 if ours else 1.2, ls="-" if ours else "--", label=n,
                  color=color(n))
        ax.set_xscale("log", base=2)
        ax.set_ylim(bottom=0)
        ax.set_title(f"{title}: {mode}", fontsize=9)
        ax.set_xlabel("seqlen")
        ax.set_ylabel("TFLOP/s")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="lower left", framealpha=0.6)
    if singles:
      labels = list(dict.fromkeys(r["label"] for r in singles))
      impls = list(dict.fromkeys(r["impl"] for r in singles
                                 if any(_timed(r, m) for m in modes)))
      width = 0.8 / max(1, len(impls))
      for j, mode in enumerate(modes):
        ax = axes[-1][j]
        for k, n in enumerate(impls):
          vals = [next((_timed(r, mode) or 0.0 for r in singles
                        if r["label"] == l and r["impl"] == n), 0.0)
                  for l in labels]
          ax.bar([i + k * width for i in range(len(labels))], vals, width,
                 label=n, color=color(n),
                 hatch=None if peers_lib.IMPLS[n].ours else "//")
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(labels))])
        ax.set_xticklabels([l.replace(" ", "\n", 2) for l in labels], fontsize=6)
        ax.set_title(f"real-model shapes: {mode}", fontsize=9)
        ax.set_ylabel("TFLOP/s")
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=6)
    fig.suptitle("TFLOP/s vs seqlen" + suffix, fontsize=11)
    fig.tight_layout()
    path = os.path.join(out_dir, "tflops.png")
    fig.savefig(path, dpi=80)
    plt.close(fig)
    written.append(path)
  if mem_rows:
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for n in dict.fromkeys(r["impl"] for r in mem_rows):
      pts = sorted((r["seqlen"], r["bytes"] / 2**30) for r in mem_rows
                   if r["impl"] == n and r.get("bytes"))
      if pts:
        ours = peers_lib.IMPLS[n].ours
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                lw=2.5 if ours else 1.2, ls="-" if ours else "--", label=n,
                color=color(n))
    if device_bytes:
      ax.axhline(device_bytes / 2**30, color="k", lw=0.8, ls=":",
                 label="memory XLA may use on the device")
    w = mem_rows[0]["workload"]
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("seqlen T (batch 1)")
    ax.set_ylabel("GiB (compiled memory_analysis)")
    ax.set_title(f"fwd+bwd memory, B=1 N={w['heads']} H={w['head_dim']} "
                 f"{w['dtype']}" + suffix, fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = os.path.join(out_dir, "memory.png")
    fig.savefig(path, dpi=80)
    plt.close(fig)
    written.append(path)
  return written


def environment() -> dict:
  d = jax.devices()[0]
  env = dict(
      date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
      backend=jax.default_backend(), device=getattr(d, "device_kind", str(d)),
      device_count=jax.device_count(), jax=jax.__version__,
      jaxlib=getattr(jax.lib, "__version__", None) or _jaxlib_version(),
      python=platform.python_version(), tokamax=peers_lib.tokamax_version(),
      host=platform.node())
  try:
    env["device_memory_bytes"] = int(d.memory_stats()["bytes_limit"])
  except Exception:
    env["device_memory_bytes"] = None
  try:
    env["nvidia_smi"] = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm",
         "--format=csv,noheader"], capture_output=True, text=True,
        timeout=20).stdout.strip() or None
  except Exception:
    env["nvidia_smi"] = None
  try:
    import pallas_flash
    env["pallas_flash"] = pallas_flash.__version__
    env["git"] = os.environ.get("BENCH_GIT") or subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True,
        text=True, timeout=10).stdout.strip() or None
  except Exception:
    pass
  return env


def _run_name(env) -> str:
  """Folder name of a GPU run: device and date, e.g. nvidia_h200_2026-11-21."""
  dev = "".join(c if c.isalnum() else "_" for c in env["device"].lower()).strip("_")
  return f"{dev}_{env['date'][:10]}"


def _jaxlib_version():
  try:
    import jaxlib
    return jaxlib.__version__
  except Exception:
    return None


def write_report(out_dir, env, command, results, mem_rows, impl_names, modes,
                 smoke, settings, notes) -> dict:
  os.makedirs(out_dir, exist_ok=True)
  with open(os.path.join(out_dir, "results.json"), "w") as f:
    json.dump(dict(env=env, command=command, settings=settings, smoke=smoke,
                   results=results, memory=mem_rows, notes=notes), f, indent=1,
              default=str)
  table = tables(results, impl_names, modes)
  with open(os.path.join(out_dir, "table.md"), "w") as f:
    f.write(table)
  pngs = [] if settings.get("no_plots") else plots(
      results, mem_rows, out_dir, modes, env.get("device_memory_bytes"), smoke)
  banner = ("> **CPU SMOKE RUN** (no GPU found): tiny shapes, Pallas interpret "
            "mode. These numbers say that the harness works, nothing about "
            "performance.\n\n" if smoke else "")
  md = ["# Benchmark results\n", banner,
        f"- Date: {env['date']}",
        f"- Device: {env['device']} x{env['device_count']} ({env['backend']})"
        + (f"; nvidia-smi: {env['nvidia_smi']}" if env.get("nvidia_smi") else ""),
        f"- JAX {env['jax']}, jaxlib {env['jaxlib']}, Python {env['python']}, "
        f"tokamax {env['tokamax'] or 'not installed'}, pallas_flash "
        f"{env.get('pallas_flash')} (git {env.get('git')})",
        f"- Command: `{command}`",
        f"- Timing: median of {settings['reps']} samples after warm-up; each "
        f"sample a burst of back-to-back calls of >= {settings['sample_s'] * 1e3:.0f} ms "
        "ending in `jax.block_until_ready`. Backward = fwd+bwd minus fwd.",
        "- FLOPs: forward 4·B·N·T·S·H (×0.5 causal); backward 2.5×, fwd+bwd "
        "3.5× the forward. Packed/padded rows count only visible (query, key) pairs.",
        "- Correctness: every output and dq/dk/dv checked against the float32 "
        "reference (batch 0, kv head 0 and its query heads, full T) before "
        f"timing; rel. error limits fwd {FWD_TOL}, bwd {BWD_TOL}. Wrong results "
        "are reported, not timed.",
        "- Memory: `compiled.memory_analysis()` of the jitted fwd+bwd "
        "(argument + output + temp − alias bytes), compiled but not run.",
        ""]
  md += notes and (["## Notes", ""] + [f"- {n}" for n in notes] + [""]) or []
  md += ["## Our kernels against the best peer", "", headline(results, impl_names), "",
         "## Which implementations ran", "", reasons(results, mem_rows), "",
         "## Tables", "", table, "",
         "## Compile time of the first call (s, forward / forward+backward; trace + lower + compile)",
         "", compile_table(results, impl_names), "",
         "## Peak memory of forward+backward vs seqlen (GiB, compiled memory_analysis)",
         "", memory_table(mem_rows, env.get("device_memory_bytes")), ""]
  md += [f"![{os.path.basename(p)}]({os.path.basename(p)})" if p.endswith(".png")
         else p for p in pngs]
  with open(os.path.join(out_dir, "RESULTS.md"), "w") as f:
    f.write("\n".join(md) + "\n")
  return dict(table=table, pngs=pngs)


# ----------------------------------------------------------------- main


def main(argv=None) -> int:
  args = parse_args(argv)
  argv_list = sys.argv[1:] if argv is None else list(argv)
  command = "python -m benchmarks.run" + "".join(" " + shlex.quote(a) for a in argv_list)
  smoke = args.smoke or jax.default_backend() != "gpu"
  env = environment()
  out_dir = args.out or (
      os.path.join(tempfile.gettempdir(), "pallas_flash_bench_smoke") if smoke
      else os.path.join("benchmarks", "results", _run_name(env)))
  settings = dict(
      reps=args.reps or (3 if smoke else 10),
      sample_s=(args.sample_ms if args.sample_ms is not None
                else (1.0 if smoke else 25.0)) / 1e3,
      verbose=bool(os.environ.get("BENCH_VERBOSE")), no_plots=args.no_plots)
  time_budget = args.time_budget if args.time_budget is not None else (
      60.0 if smoke else None)

  def log(s):
    print(s, flush=True)

  if smoke:
    log("=" * 78)
    log("NO GPU FOUND: running the CPU SMOKE version (tiny shapes, Pallas "
        "interpret mode).\nIts numbers are not performance; run on a GPU for "
        "real results.")
    log("=" * 78)
  log(f"{env['date']}  device {env['device']}  jax {env['jax']}  "
      f"tokamax {env['tokamax'] or 'not installed'}")
  names = [n for n in (args.impls or peers_lib.IMPLS) if n not in args.skip_impls]
  impls = [peers_lib.IMPLS[n] for n in names]
  modes = ("fwd",) if args.only == "fwd" else MODES
  cells, mem = select_workloads(args, smoke)
  log(f"{len(cells)} cells x {len(impls)} implementations "
      f"({', '.join(names)}); memory sweep {len(mem)} seqlens")
  notes = []
  results, mem_rows = [], []
  t_start = time.perf_counter()
  try:
    for i, w in enumerate(cells):
      elapsed = time.perf_counter() - t_start
      if time_budget is not None and elapsed > time_budget:
        notes.append(f"time budget {time_budget:.0f}s spent: {len(cells) - i} "
                     "cells not run: " + "; ".join(c.label for c in cells[i:]))
        log(notes[-1])
        break
      log(f"[{i + 1}/{len(cells)}] {w.label}  ({elapsed:.0f}s)")
      results += bench_cell(w, impls, args, settings, log)
      write_report(out_dir, env, command, results, mem_rows, names, modes,
                   smoke, settings | dict(no_plots=True), notes)
    if mem:
      if time_budget is not None and time.perf_counter() - t_start > time_budget:
        notes.append("time budget spent: memory sweep not run")
      else:
        log("memory sweep (fwd+bwd compiled, not run)")
        mem_rows = memory_sweep(mem, impls, args, log)
  finally:
    rep = write_report(out_dir, env, command, results, mem_rows, names, modes,
                       smoke, settings, notes)
  log("")
  log(rep["table"])
  log("Our kernels against the best peer:")
  log(headline(results, names))
  log("")
  log(reasons(results, mem_rows))
  log(f"\nwrote {out_dir}/RESULTS.md, table.md, results.json"
      + "".join(f", {os.path.basename(p)}" for p in rep["pngs"] if p.endswith(".png")))
  log(f"total {time.perf_counter() - t_start:.0f}s" + ("  (CPU SMOKE RUN)" if smoke else ""))
  return 0


if __name__ == "__main__":
  sys.exit(main())
