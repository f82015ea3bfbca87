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
3. time every implementation's checked forward and fwd+bwd together:
   warm-up, then ``--reps`` reps, each one back-to-back burst of calls of
   every entry (in a fresh random order per rep) ending in
   ``jax.block_until_ready``, long enough (>= ``--sample-ms``) that dispatch
   overhead is amortised; the median of the per-call times, and for our
   implementations the quartiles of the per-rep time ratios to each peer
   (one rep's bursts come from one pass over the cell, so clock and
   temperature drift cancel in them).
   Backward = median(fwd+bwd) - median(fwd); per rep, fwd+bwd - fwd.
   TFLOP/s: forward FLOPs 4*B*N*T*S*H (x0.5 causal), backward 2.5x,
   fwd+bwd 3.5x;
4. peak memory of fwd+bwd from ``compiled.memory_analysis()`` (argument +
   output + temp - alias bytes: what XLA allocates for the step, known before
   it runs, so cells that would not fit are reported instead of run).

With ``--features alibi dropout bias`` each convention cell is followed by
the same cell with that score feature (``workloads.with_feature``); a cell
and its feature cells are compiled, checked and timed as one group
(``cell_groups``), so ours with a feature against ours without it is a
paired ratio too (``paired_plain``; the report's "Score features").

Then a memory sweep (fwd+bwd compiled, not run, T up to 128k) and the
outputs in ``--out``: ``results.json``, ``table.md``, ``RESULTS.md``,
``tflops.png``, ``memory.png``.

On a machine without a GPU the same command runs a small smoke version (tiny
shapes, Pallas interpret mode) and says so: its numbers are not performance.

This module: arguments, workload selection, the reference check, the cells'
loop.  How calls are timed and sized: ``benchmarks.timing``; tables, plots
and files: ``benchmarks.report``.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import sys
import tempfile
import time
import traceback

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import peers as peers_lib
from benchmarks import report
from benchmarks import timing
from benchmarks import workloads as wl
# ||x - ref|| / ||ref|| limits.  bf16 keeps 8 mantissa bits (2^-9 = 2e-3 per
# element after rounding the output; P is rounded to bf16 before P @ V).
# fp8 (e4m3: 3 mantissa bits, 2^-4 relative per rounding, 3.6% rms): P is
# rounded to e4m3 (ours: 2-3% rms in O); cuDNN also writes O in e4m3.
FWD_TOL = {"bfloat16": 2e-2, "float16": 5e-3, "float32": 1e-3,
           "float8_e4m3fn": 1e-1}
BWD_TOL = {"bfloat16": 5e-2, "float16": 1e-2, "float32": 2e-3}


# ----------------------------------------------------------------- arguments


def parse_args(argv=None):
  p = argparse.ArgumentParser(
      prog="python -m benchmarks.run",
      description="Time pallas_flash and its peers (see the module docstring).")
  p.add_argument("--quick", action="store_true",
                 help="bf16, d64/d128, T=4096 (+ real-model shapes, a short "
                      "memory sweep): a few minutes on one GPU")
  p.add_argument("--dtype", nargs="+", choices=("bf16", "fp16", "fp8"),
                 default=None,
                 help="fp8: float8_e4m3fn q, k, v (unit descales), forward "
                      "only, against cuDNN's fp8 attention (cudnn-fp8)")
  p.add_argument("--head-dims", nargs="+", type=int, default=None)
  p.add_argument("--seqlens", nargs="+", type=int, default=None)
  p.add_argument("--causal", choices=("both", "yes", "no"), default="both")
  p.add_argument("--workloads", nargs="+", default=None,
                 choices=("convention", "gqa", "packed", "padded", "long",
                          "memory"),
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
  p.add_argument("--features", nargs="+", choices=tuple(wl.FEATURES),
                 default=(),
                 help="also run each convention cell with ALiBi, dropout 0.1 "
                      "and / or a [1, N, T, S] bias, right after the cell "
                      "itself: the table 'Score features' gives ours with "
                      "the feature / ours without it (issue 50)")
  p.add_argument("--memory-seqlens", nargs="+", type=int, default=None)
  p.add_argument("--xla-max-seqlen", type=int, default=16384,
                 help="do not time the O(T^2) XLA path above this T")
  p.add_argument("--reps", type=int, default=None,
                 help="timed reps, each one burst of every call of the cell "
                      "(default 21 on a GPU)")
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
  dtypes = tuple({"bf16": "bfloat16", "fp16": "float16",
                  "fp8": "float8_e4m3fn"}[d]
                 for d in (args.dtype or (("bf16",) if (args.quick or smoke)
                                          else ("bf16", "fp16"))))
  causals = {"both": (False, True), "yes": (True,), "no": (False,)}[args.causal]
  groups = set(args.workloads or ("convention", "gqa", "packed", "padded", "long",
                                   "memory"))
  if smoke:
    head_dims = tuple(args.head_dims or (32,))
    seqlens = tuple(args.seqlens or (128, 256))
    if args.causal == "both":  # the gqa/packed smoke cells are causal
      causals = (False,)
    conv = wl.convention(seqlens=seqlens, head_dims=head_dims, causals=causals,
                         dtypes=dtypes, tokens=256, hidden=64)
    real = wl.real_models(dtypes=dtypes[:1], scale=16)
    real += wl.long_context(seqlen=512, heads=2, head_dim=32, dtypes=dtypes[:1])
    mem_seqlens = tuple(args.memory_seqlens or (128, 256, 512))
    mem = wl.memory_sweep(seqlens=mem_seqlens, head_dim=32, heads=2,
                          dtype=dtypes[0])
  else:
    head_dims = tuple(args.head_dims or ((64, 128) if args.quick else wl.HEAD_DIMS))
    seqlens = tuple(args.seqlens or ((4096,) if args.quick else wl.SEQLENS))
    conv = wl.convention(seqlens=seqlens, head_dims=head_dims, causals=causals,
                         dtypes=dtypes)
    real = wl.real_models(dtypes=dtypes[:1]) + wl.long_context(dtypes=dtypes[:1])
    mem_seqlens = tuple(args.memory_seqlens or (
        (4096, 32768, 131072) if args.quick
        else (1024, 4096, 16384, 32768, 65536, 131072)))
    mem = wl.memory_sweep(seqlens=mem_seqlens, dtype=dtypes[0])
  cells = [w for w in conv if "convention" in groups]
  cells += [w for w in real if w.name in groups]
  if args.match:
    cells = [w for w in cells if any(m in w.label for m in args.match)]
  cells = [c for w in cells for c in (
      [w] + [wl.with_feature(w, f) for f in args.features
             if w.name == "convention" and w.dtype != "float8_e4m3fn"])]
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
  """float32 reference on batch 0, kv head 0 and its query heads, full T;
  or with ``tail`` only the last ``tail`` query rows against every key (the
  XLA reference's [T, S] scores do not fit at T = 128k): out and dQ of those
  rows are checked, dK and dV (sums over every row) are not.  With a bias
  ([1, N, T, S], ``--features bias``) every batch row, so that dbias (a sum
  over them) is checked too."""

  def __init__(self, w: wl.Workload, x: wl.Inputs, tail: int | None = None):
    self.w, self.x, self.tail = w, x, tail
    self.group = w.heads // w.kv_heads
    self.rows = slice(None) if x.bias is not None else slice(0, 1)
    self._cache = {}
    t = w.seqlen
    if x.q_lengths is not None:
      if tail:
        raise ValueError("a tail reference takes no padded lengths")
      self.q_rows = jnp.arange(t) < x.q_lengths[0]
      self.kv_rows = jnp.arange(t) < x.kv_lengths[0]
    else:
      self.q_rows = self.kv_rows = None

  def slice_q(self, a):
    b = self.rows
    return a[b, -self.tail:, :self.group] if self.tail else a[b, :, :self.group]

  def slice_kv(self, a):
    return a[self.rows, :, :1]

  def get(self, scale: float):
    if scale not in self._cache:
      from pallas_flash import flash_attention
      w, x = self.w, self.x
      seg = None if x.segment_ids is None else x.segment_ids[:1]
      ql = None if x.q_lengths is None else x.q_lengths[:1]
      kl = None if x.kv_lengths is None else x.kv_lengths[:1]

      # The features of the sliced heads: ALiBi's slopes and the bias's
      # heads [0, group); the dropout bits hash the (batch row, head) index,
      # which the slice keeps.
      slopes = None if x.alibi_slopes is None else x.alibi_slopes[:self.group]

      @jax.jit
      def ref(q, k, v, do, bias):
        f = lambda q, k, v, bias: flash_attention(
            q, k, v, bias, scale=scale, is_causal=w.causal,
            implementation="xla",
            # the tail rows keep their diagonal against all S keys
            causal_alignment="bottom_right" if self.tail else "top_left",
            query_segment_ids=seg, query_seq_lengths=ql,
            key_value_seq_lengths=kl, alibi_slopes=slopes,
            dropout_rate=w.dropout, dropout_rng=x.dropout_rng)
        out, vjp = jax.vjp(f, q, k, v, bias)
        grads = vjp(do)
        return (out,) + tuple(grads[:3]) + (() if bias is None
                                            else (grads[3],))

      f32 = lambda a: a.astype(jnp.float32)
      self._cache[scale] = jax.block_until_ready(ref(
          f32(self.slice_q(x.q)), f32(self.slice_kv(x.k)),
          f32(self.slice_kv(x.v)), f32(self.slice_q(x.do)),
          None if x.bias is None else f32(self.slice_bias(x.bias))))
    return self._cache[scale]

  def slice_bias(self, a):  # [1, N, T, S] -> the reference's heads and rows
    return a[:, :self.group, -self.tail:] if self.tail else a[:, :self.group]


def _make_fwdbwd(fn):
  """(out, dq, dk, dv), and dbias where ``aux`` has a bias."""
  def fwdbwd(q, k, v, aux, do):
    if aux.get("bias") is None:
      out, vjp = jax.vjp(lambda q, k, v: fn(q, k, v, aux), q, k, v)
    else:
      out, vjp = jax.vjp(lambda q, k, v, b: fn(q, k, v, {**aux, "bias": b}),
                         q, k, v, aux["bias"])
    return (out,) + tuple(vjp(do))
  return fwdbwd


# The memory sweep only compiles.  XLA's GEMM autotuner would run the O(T^2)
# path's fusions to pick tile configs and fails when they need more than the
# device holds (1 TiB at T = 128k); without autotuning it still compiles and
# reports the buffer sizes.
_MEMORY_SWEEP_OPTIONS = {"xla_gpu_autotune_level": 0}


def cell_groups(cells: list[wl.Workload]) -> list[list[wl.Workload]]:
  """The cells in timing groups: a cell and the score-feature cells that
  follow it (``--features``) are timed together, so that a feature's cost
  is a paired ratio like a peer's; every other cell alone."""
  groups = []
  for w in cells:
    if (w.features and groups
        and groups[-1][0].label == wl.without_features(w).label):
      groups[-1].append(w)
    else:
      groups.append([w])
  return groups


def bench_cells(cells: list[wl.Workload], impls, args, settings,
                log) -> list[dict]:
  """Every implementation on each cell of one group (``cell_groups``):
  build, compile and check each (steps 1-2 of the module docstring), then
  time all of them, every cell of the group, together (step 3)."""
  calls = {}  # (label, impl name, "fwd" | "fwdbwd"): (executable, args)
  per_cell, results = [], []
  for w in cells:
    if len(cells) > 1:
      log(f"  {w.label}")
    x = wl.make_inputs(w)
    # Beyond --xla-max-seqlen the reference checks the last query rows only.
    tail = min(2048, w.seqlen // 4) if w.seqlen > args.xla_max_seqlen else None
    # (a tail's rows would draw other dropout bits: such cells go unchecked)
    ref = (None if args.no_check or (tail and w.dropout)
           else Reference(w, x, tail))
    rs = []
    for impl in impls:
      r = dict(impl=impl.name, ours=impl.ours, label=w.label,
               workload=dataclasses.asdict(w), visible_pairs=x.visible_pairs,
               status_fwd="not run", status_bwd="not run")
      if w.features:  # the cell this one's feature cost is measured against
        r["plain_label"] = wl.without_features(w).label
      rs.append(r)
      t_cell = time.perf_counter()
      for (name, mode), call in _compile_and_check(
          impl, w, x, ref, r, args, settings, log).items():
        calls[(w.label, name, mode)] = call
      r["prepare_s"] = time.perf_counter() - t_cell
    per_cell.append((w, x, rs))
    results += rs
  _time_cells(per_cell, calls, settings)
  for r in results:
    log("  " + _summary_line(r) + f"   [{r.pop('prepare_s'):.1f}s to compile and check]")
  return results


def _compile_and_check(impl, w, x, ref, r, args, settings, log) -> dict:
  """Build ``impl`` on cell ``w``, compile its forward and its fwd+bwd, run
  each once and check it against ``ref``; the statuses go into ``r``.
  Returns the entries that passed, for ``_time_cells``."""
  fwd_tol, bwd_tol = FWD_TOL[w.dtype], BWD_TOL.get(w.dtype)
  calls = {}
  try:
    if impl.name == "xla" and w.seqlen > args.xla_max_seqlen:
      raise NotImplementedError(f"T={w.seqlen} > --xla-max-seqlen "
                                f"{args.xla_max_seqlen} (O(T^2) path)")
    fn, aux = impl.build(w, x)
  except Exception as e:
    r["status_fwd"] = r["status_bwd"] = f"did not run: {report.reason(e)}"
    log(f"  {impl.name:15s} did not run: {report.reason(e)}")
    return calls

  def failed(status_key, e):
    r[status_key] = f"did not run: {report.reason(e)}"
    if settings["verbose"]:
      traceback.print_exc()

  def compile_fits(f, mode, *a):  # -> the executable; its sizes into r
    c, r[f"compile_{mode}_s"] = timing.compile_timed(
        f, *a, options=impl.compile_options)
    r[f"mem_{mode}_bytes"] = timing.mem_bytes(c)
    need, free = timing.temp_bytes(c), timing.free_device_bytes()
    if need is not None and free is not None and need > free:
      raise MemoryError(f"needs {need / 2**30:.1f} GiB (memory_analysis) > "
                        f"{free / 2**30:.1f} GiB free")
    return c

  scale = impl.ref_scale(w)
  # ---- forward
  try:
    fargs = (x.q, x.k, x.v, aux)
    cf = compile_fits(fn, "fwd", *fargs)
    out = jax.block_until_ready(cf(*fargs))
    if ref is not None:
      e = rel_err(ref.slice_q(out), ref.get(scale)[0], ref.q_rows)
      r["err_fwd"] = e
      if not e <= fwd_tol:
        r["status_fwd"] = f"wrong: fwd rel err {e:.2e} > {fwd_tol:g}"
        r["status_bwd"] = "not timed: forward wrong"
        log(f"  {impl.name:15s} {r['status_fwd']}")
        return calls
    del out
    calls[(impl.name, "fwd")] = (cf, fargs)
  except Exception as e:
    failed("status_fwd", e)
  # ---- forward + backward
  if args.only == "fwd":
    r["status_bwd"] = "skipped (--only fwd)"
    return calls
  if w.dtype == "float8_e4m3fn":
    r["status_bwd"] = "skipped (fp8: forward only)"
    return calls
  try:
    bargs = (x.q, x.k, x.v, aux, x.do)
    cb = compile_fits(_make_fwdbwd(fn), "fwdbwd", *bargs)
    outs = jax.block_until_ready(cb(*bargs))
    if ref is not None:
      _, dq_r, dk_r, dv_r, *dbias_r = ref.get(scale)
      errs = dict(dq=rel_err(ref.slice_q(outs[1]), dq_r, ref.q_rows))
      if not ref.tail:  # (a tail's dK / dV miss the other rows' terms)
        errs.update(
            dk=rel_err(ref.slice_kv(outs[2]), dk_r, ref.kv_rows),
            dv=rel_err(ref.slice_kv(outs[3]), dv_r, ref.kv_rows))
        if dbias_r:  # (the bias cells' reference takes every batch row)
          errs["dbias"] = rel_err(ref.slice_bias(outs[4]), dbias_r[0])
      r["err_bwd"] = max(errs.values())
      r["err_bwd_parts"] = errs
      bad = {k: v for k, v in errs.items() if not v <= bwd_tol}
      if bad:
        r["status_bwd"] = ("wrong: " + ", ".join(
            f"{k} rel err {v:.2e}" for k, v in bad.items()) + f" > {bwd_tol:g}")
        return calls
    del outs
    calls[(impl.name, "fwdbwd")] = (cb, bargs)
  except Exception as e:
    failed("status_bwd", e)
  return calls


def _paired(per_rep, a_key, b_key):
  """({mode: (q25, q50, q75) of the per-rep time ratios a / b}, {mode: reps
  left out}) over ``report.MODES``; keys (label, impl) into ``per_rep``."""
  ratios, dropped = {}, {}
  for mode in report.MODES:
    a, b = per_rep.get((*a_key, mode)), per_rep.get((*b_key, mode))
    if a is None or b is None:
      continue
    keep = (a > 0) & (b > 0)  # (a backward of one rep can read <= 0)
    if keep.any():
      ratios[mode] = timing.paired_ratio(a[keep], b[keep])
    if not keep.all():
      dropped[mode] = int((~keep).sum())
  return ratios, dropped


def _time_cells(per_cell, calls, settings):
  """Step 3: every checked executable of a group of cells (``per_cell``:
  (workload, inputs, results) each), every implementation's forward and
  fwd+bwd, timed in one ``timing.interleaved_samples`` run (each rep one
  burst of each, in a fresh random order), so that the ratios of one rep
  compare calls of one pass over the group.  Per implementation and cell:
  medians, TFLOP/s, the per-rep samples; for ours, ``paired[peer][mode]`` =
  (q25, q50, q75) of the per-rep time ratios peer / ours on the cell (> 1:
  ours faster), the backward's per rep being fwd+bwd minus fwd of the same
  rep (a rep where that is <= 0 is left out and counted in
  ``paired_dropped``); on a score-feature cell, ``paired_plain[mode]``: the
  per-rep time ratios ours without the feature / ours with it (< 1: the
  feature costs)."""
  if not calls:
    return
  samples, bursts = timing.interleaved_samples(calls, settings["reps"],
                                               settings["sample_s"])
  per_rep = {key: np.asarray(xs) for key, xs in samples.items()}
  for w, x, results in per_cell:
    flops = lambda mode: wl.flops(w, x.visible_pairs, mode)
    for r in results:
      key = lambda mode: (w.label, r["impl"], mode)
      for mode in ("fwd", "fwdbwd"):
        if key(mode) in samples:
          xs = samples[key(mode)]
          med, spread = timing.summarise(xs)
          r.update({f"t_{mode}_s": med, f"spread_{mode}": spread,
                    f"samples_{mode}_s": xs,
                    f"calls_per_sample_{mode}": bursts[key(mode)],
                    f"tflops_{mode}": flops(mode) / med / 1e12})
      if key("fwd") in samples:
        r["status_fwd"] = "ok"
      if key("fwdbwd") not in samples:
        continue
      if r["status_fwd"] != "ok":
        r["status_bwd"] = "fwd+bwd only (forward did not run alone)"
        continue
      t_bwd = r["t_fwdbwd_s"] - r["t_fwd_s"]
      r["t_bwd_s"] = t_bwd
      per_rep[key("bwd")] = per_rep[key("fwdbwd")] - per_rep[key("fwd")]
      if t_bwd > 0:
        r["tflops_bwd"] = flops("bwd") / t_bwd / 1e12
        r["status_bwd"] = "ok"
      else:
        r["status_bwd"] = "ok (fwd+bwd <= fwd: noise)"
    for r in results:
      if not r["ours"]:
        continue
      for p in results:
        if p["ours"]:
          continue
        ratios, dropped = _paired(per_rep, (w.label, p["impl"]),
                                  (w.label, r["impl"]))
        if ratios:
          r.setdefault("paired", {})[p["impl"]] = ratios
        if dropped:  # reps left out of a ratio (report.paired_table says so)
          r.setdefault("paired_dropped", {})[p["impl"]] = dropped
      if r.get("plain_label"):
        ratios, _ = _paired(per_rep, (r["plain_label"], r["impl"]),
                            (w.label, r["impl"]))
        if ratios:
          r["paired_plain"] = ratios


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
        c, r["compile_s"] = timing.compile_timed(
            _make_fwdbwd(fn), x.q, x.k, x.v, aux, x.do,
            options={**(_MEMORY_SWEEP_OPTIONS if on_gpu else {}),
                     **(impl.compile_options or {})} or None)
        r["bytes"] = timing.mem_bytes(c)
        r["status"] = "ok" if r["bytes"] is not None else "no memory_analysis"
        del c
      except Exception as e:
        r["status"] = f"did not run: {report.reason(e)}"
      gib = f"{r['bytes'] / 2**30:9.3f} GiB" if r.get("bytes") else r["status"]
      log(f"  memory T={t:6d} {impl.name:15s} {gib}")
  return rows


# ----------------------------------------------------------------- main


def main(argv=None) -> int:
  args = parse_args(argv)
  argv_list = sys.argv[1:] if argv is None else list(argv)
  command = "python -m benchmarks.run" + "".join(" " + shlex.quote(a) for a in argv_list)
  smoke = args.smoke or jax.default_backend() != "gpu"
  env = report.environment()
  out_dir = args.out or (
      os.path.join(tempfile.gettempdir(), "pallas_flash_bench_smoke") if smoke
      else os.path.join("benchmarks", "results", report.run_name(env)))
  settings = dict(
      reps=args.reps or (3 if smoke else 21),
      sample_s=(args.sample_ms if args.sample_ms is not None
                else (1.0 if smoke else 25.0)) / 1e3,
      verbose=bool(os.environ.get("BENCH_VERBOSE")), no_plots=args.no_plots,
      tolerances=dict(fwd=FWD_TOL, bwd=BWD_TOL))
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
  modes = ("fwd",) if args.only == "fwd" else report.MODES
  cells, mem = select_workloads(args, smoke)
  log(f"{len(cells)} cells x {len(impls)} implementations "
      f"({', '.join(names)}); memory sweep {len(mem)} seqlens")
  notes = []
  results, mem_rows = [], []
  t_start = time.perf_counter()
  try:
    groups = cell_groups(cells)
    for i, group in enumerate(groups):
      elapsed = time.perf_counter() - t_start
      if time_budget is not None and elapsed > time_budget:
        left = [c.label for g in groups[i:] for c in g]
        notes.append(f"time budget {time_budget:.0f}s spent: {len(left)} "
                     "cells not run: " + "; ".join(left))
        log(notes[-1])
        break
      log(f"[{i + 1}/{len(groups)}] {group[0].label}"
          + (f" and {len(group) - 1} feature cells" if len(group) > 1 else "")
          + f"  ({elapsed:.0f}s)")
      results += bench_cells(group, impls, args, settings, log)
      report.write_report(out_dir, env, command, results, mem_rows, names, modes,
                   smoke, settings | dict(no_plots=True), notes)
    if mem:
      if time_budget is not None and time.perf_counter() - t_start > time_budget:
        notes.append("time budget spent: memory sweep not run")
      else:
        log("memory sweep (fwd+bwd compiled, not run)")
        mem_rows = memory_sweep(mem, impls, args, log)
  finally:
    rep = report.write_report(out_dir, env, command, results, mem_rows, names, modes,
                       smoke, settings, notes)
  log("")
  log(rep["table"])
  log("Our kernels against the best peer:")
  log(report.headline(results, names))
  log("Per-rep paired time ratios, best peer / ours, median [q25, q75]:")
  log(report.paired_table(results, names))
  feats = report.features_table(results, names)
  if feats:
    log("Score features, ours with the feature against ours without it and "
        "the best peer with it, per-rep time ratios, median [q25, q75]:")
    log(feats)
  log("")
  log(report.reasons(results, mem_rows))
  log(f"\nwrote {out_dir}/RESULTS.md, table.md, results.json"
      + "".join(f", {os.path.basename(p)}" for p in rep["pngs"] if p.endswith(".png")))
  log(f"total {time.perf_counter() - t_start:.0f}s" + ("  (CPU SMOKE RUN)" if smoke else ""))
  return 0


if __name__ == "__main__":
  sys.exit(main())
