"""Mosaic GPU forward: TFLOP/s against
cuDNN (``jax.nn.dot_product_attention(implementation="cudnn")``) and, when
its wheels are importable, tokamax's Mosaic forward, in the same process on
the same inputs.

Workload (FlashAttention papers): B * T = 16384 tokens, hidden 2048, heads =
2048 / H; forward FLOPs 4 * B * N * T * S * H, halved when causal.

  PYTHONPATH=$PWD python3 benchmarks/mosaic_bench.py [--bench]
      [--variant persistent=True,...] [--tokamax] [--packed]
      [--baseline OLD_FORWARD.py] [--head-dims 64,128] [--out DIR]
      [--dtype fp8] [--cells d128-4k-N,d128-16k-C]

``--dtype fp8``: q, k, v quantized to float8_e4m3fn per tensor
(``pallas_flash.fp8.quantize``); ours is ``flash_attention(q8, k8, v8,
q_descale=, k_descale=, v_descale=, implementation="mosaic", config=)``, the
peer cuDNN's fp8 attention (``peers.cudnn_fp8``, as benchmarks.run's
``cudnn-fp8``, with the same descales); each config is checked against the
float32 reference on the dequantized inputs before it is timed (relative
error <= benchmarks.run.FWD_TOL, 0.1).

``--baseline``: a saved copy of ``pallas_flash/mosaic/forward.py`` timed
beside the tree's (it imports the tree's ``pipeline.py`` and
``score_tiles.py``, so a change there is in both: A/B such a change with
two processes, or a ``--variant`` that switches it).  Calibrate before reading a small difference: with the
tree's own forward as the first baseline (H200, 2026-11-30, 9 reps) it read
3-4% above the identical default (d64 S4k C 1.117 vs 1.082 of cuDNN, d128
S16k C 1.248 vs 1.202), the second baseline not; pass the tree's copy first
and compare the others with it.

Every variant that ``check_supported`` refuses (shared memory, fp8's
block_kv) or whose fields are invalid is listed with the reason, not timed.
Prints a short table last (the variants with the per-rep paired ratio to
cuDNN); with --out writes a log and a JSON of results.
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import datetime
import json
import os
import sys

import jax
import jax.numpy as jnp

from benchmarks import peers, workloads
from benchmarks.run import FWD_TOL, rel_err
from benchmarks.timing import (interleaved_samples, paired_ratio, summarise,
                               time_interleaved)
import pallas_flash as pf
from pallas_flash import masks
from pallas_flash.mosaic import forward as mosaic_forward
from pallas_flash.mosaic.config import MosaicConfig
from pallas_flash.params import KernelParams

CELLS = [  # (head_dim, seqlen, causal)
    (64, 4096, False), (64, 4096, True), (64, 16384, False), (64, 16384, True),
    (128, 4096, False), (128, 4096, True), (128, 16384, False),
    (128, 16384, True), (256, 1024, False), (256, 1024, True),
]
_C = MosaicConfig


def fitting_configs(h, causal, seqlen, variants, fp8: bool = False):
  """([(name, variant text, config)], [(variant text, reason)]) of a cell:
  the default config (None, "default"), then the default with each variant's
  fields replaced, e.g. {"persistent": False}, where the forward's
  ``check_supported`` takes it; the others with the reason (too much shared
  memory, invalid fields).  (Earlier sweeps of tile width, visiting order,
  softmax overlap and launch order settled the table in
  pallas_flash/mosaic/config.py; docs/design.md gives the deciding figures,
  docs/mosaic.md as of commit 29bf24f the runs.)"""
  base = _C.default(h, causal, kv_seqlen=seqlen, fp8=fp8)
  x = jax.ShapeDtypeStruct((1, seqlen, 1, h),
                           pf.fp8.E4M3 if fp8 else jnp.bfloat16)
  kept, skipped = [("default", "default", None)], []
  for fields in variants:
    text = ",".join(f"{k}={v!r}" for k, v in fields.items())
    cfg = None
    try:
      cfg = dataclasses.replace(base, **fields)
      params = KernelParams(spec=masks.MaskSpec(is_causal=causal),
                            scale=h ** -0.5, forward="mosaic", config=cfg,
                            interpret=True)  # (no device check)
      mosaic_forward.check_supported(params, x, x, x)
    except (TypeError, ValueError, NotImplementedError) as e:
      reason = str(e) if cfg is None else str(e).replace(str(cfg),
                                                         _cfg_name(cfg))
      skipped.append((text, reason))
      continue
    # (the variant's text too: fields _cfg_name does not spell, e.g.
    # reduce_ilp, would give two variants one name and time only the last)
    kept.append((f"{_cfg_name(cfg)}|{text}", text, cfg))
  return kept, skipped


def parse_variant(text):
  """'persistent=True,block_kv=64' -> {'persistent': True, 'block_kv': 64}."""
  return {k: ast.literal_eval(v) for k, v in
          (item.split("=", 1) for item in text.split(","))}


def parse_cells(text):
  """'d128-4k-N,d128-16k-C' -> [(128, 4096, False), (128, 16384, True)]."""
  cells = []
  for item in filter(None, text.split(",")):
    try:
      d, t, c = item.strip().split("-")
      if not (d[0] == "d" and c in ("N", "C")):
        raise ValueError
      t = int(t[:-1]) * 1024 if t.endswith("k") else int(t)
      cells.append((int(d[1:]), t, c == "C"))
    except ValueError:
      raise ValueError(f"cell {item!r}: expected d<head dim>-<seqlen>[k]-N|C,"
                       " e.g. d128-4k-C") from None
  return cells


def select_cells(cells=None, head_dims=None):
  """``cells`` (default ``CELLS``) with a head dim in ``head_dims`` (all
  when empty)."""
  return [c for c in (cells or CELLS) if not head_dims or c[0] in head_dims]


def mosaic_kernels(compiled) -> int:
  """Mosaic GPU kernels in a compiled executable: a forward with the two
  backward kernels is 3, with the fused backward 2, and 1 where
  ``check_supported`` sent the backward to triton (which runs 187 and 201
  timed unseen)."""
  return compiled.as_text().count('custom_call_target="mosaic_gpu_v2"')


def log(*a):
  print(*a, flush=True)


def mosaic_fn(spec, scale, cap=None, config=None, module=mosaic_forward):
  def f(q, k, v, arrays):
    params = KernelParams(spec=spec, scale=scale, logits_soft_cap=cap,
                          forward="mosaic", config=config)
    return module.forward(q, k, v, arrays, params)
  return jax.jit(f)


def cell_workload(h, t, causal, tokens=workloads.TOKENS,
                  hidden=workloads.HIDDEN) -> workloads.Workload:
  """A cell as the shared workload description: the convention's bf16 cell
  (B x T = 16384 tokens, hidden 2048, N = 2048 / H) up to 16k tokens; beyond,
  one sequence of 16 heads (issue 12's long-context cell).  Smaller
  ``tokens`` and ``hidden``: a CPU smoke run's cell."""
  if t <= tokens:
    return workloads.convention(seqlens=(t,), head_dims=(h,),
                                causals=(causal,), dtypes=("bfloat16",),
                                tokens=tokens, hidden=hidden)[0]
  return workloads.long_context(seqlen=t, head_dim=h, causal=causal)[0]


def cell_inputs(h, t, causal, tokens=workloads.TOKENS,
                hidden=workloads.HIDDEN):
  """(b, n, (q, k, v) bf16 [B, T, N, H], forward FLOPs) of a cell
  (``workloads.make_inputs`` of ``cell_workload``)."""
  w = cell_workload(h, t, causal, tokens, hidden)
  x = workloads.make_inputs(w)
  return (w.batch, w.heads, (x.q, x.k, x.v),
          workloads.flops(w, x.visible_pairs, "fwd"))


def full_arrays(b, t, s):
  return masks.MaskArrays(jnp.full((b,), t, jnp.int32),
                          jnp.full((b,), s, jnp.int32))


def f32_reference(q, k, v, causal, descales=(1.0, 1.0, 1.0)):
  """float32 attention ([B, T, N, H], N == K) of ``x * descale`` for q, k,
  v, one (batch row, head) at a time (one [T, S] score matrix in memory)."""
  b, t, n, h = q.shape
  rows = lambda x, d: jnp.moveaxis(x.astype(jnp.float32) * d, 2, 1).reshape(
      b * n, x.shape[1], h)[:, :, None]  # [B * N, T, 1, H]

  @jax.jit
  def ref(q, k, v):
    one = lambda a: pf.flash_attention(a[0][None], a[1][None], a[2][None],
                                       is_causal=causal,
                                       implementation="xla")[0]
    out = jax.lax.map(one, (q, k, v))  # [B * N, T, 1, H]
    return jnp.moveaxis(out.reshape(b, n, t, h), 1, 2)

  with jax.default_matmul_precision("highest"):
    return ref(*(rows(x, d) for x, d in zip((q, k, v), descales)))


# --------------------------------------------------------------------------
# Timing


def tokamax_fn(causal):
  try:
    import tokamax  # noqa: F401
  except Exception as e:  # optional peer
    log(f"tokamax not importable: {e}")
    return None
  def f(q, k, v):
    return tokamax.dot_product_attention(q, k, v, is_causal=causal,
                                         implementation="mosaic")
  return jax.jit(f)


def load_baseline(path):
  """A saved copy of mosaic/forward.py (e.g. `git show REV:...`), for A/B."""
  import importlib.util
  name = "mosaic_baseline_" + os.path.splitext(os.path.basename(path))[0]
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = module  # dataclasses look their module up
  spec.loader.exec_module(module)
  return module


def _cfg_name(cfg):
  if cfg is None:
    return "default"
  group = cfg.head_group_mib if cfg.heads_inner and cfg.persistent else ""
  return (f"bk{cfg.block_kv}s{cfg.num_stages}{'h' if cfg.heads_inner else ''}"
          f"{group}"
          f"{'M' if cfg.masked_first else 'A'}{'O' if cfg.overlap_softmax else ''}"
          f"{'P' if cfg.persistent else ''}"
          f"{'c3' if cfg.consumers == 3 else ''}"
          f"{f't{cfg.row_tree}' if cfg.row_tree else ''}")


def cell_calls(h, t, causal, b, variants, with_tokamax: bool, baselines=()):
  """{name: jitted f(q, k, v) -> out} of one cell: cuDNN, ours (the default
  config and each variant that fits in shared memory), saved baselines and,
  when importable, tokamax."""
  arrays, spec = full_arrays(b, t, t), masks.MaskSpec(is_causal=causal)
  calls = {"cudnn": jax.jit(lambda q, k, v: jax.nn.dot_product_attention(
      q, k, v, is_causal=causal, implementation="cudnn"))}
  configs, _ = fitting_configs(h, causal, t, variants)
  ours = [(f"mosaic[{name}]", mosaic_fn(spec, h ** -0.5, None, cfg))
          for name, _, cfg in configs]
  ours += [(f"baseline[{name}]", mosaic_fn(spec, h ** -0.5, module=module))
           for name, module in baselines]
  for name, f in ours:
    calls[name] = jax.jit(lambda q, k, v, f=f: f(q, k, v, arrays)[0])
  if with_tokamax and (tk := tokamax_fn(causal)) is not None:
    calls["tokamax"] = tk
  return calls


def warm_up():
  """Bring the GPU to its running clocks before the first cell (the first
  cell of a fresh process measured low for some implementations otherwise);
  nothing on a CPU."""
  if not peers.on_gpu():
    return
  x = jnp.ones((8192, 8192), jnp.bfloat16)
  mm = jax.jit(lambda x: x @ x)
  jax.block_until_ready(mm(x))
  time_interleaved({"warm-up": (mm, (x,))}, reps=5, sample_s=0.2)


def cell_row(h, t, causal, b, n, peer, configs, skipped, **extra):
  """A cell's result row before timing: its shape, the peer the ratios are
  to, our configs ({name: variant text}), the variants refused with the
  reason; ``failed`` and ``paired`` are filled in later."""
  return {"head_dim": h, "seqlen": t, "causal": causal, "batch": b,
          "heads": n, **extra, "peer": peer,
          "variants": {f"mosaic[{name}]": text for name, text, _ in configs},
          "skipped": [list(x) for x in skipped], "failed": {}, "paired": {}}


def warm_calls(calls, row):
  """The entries of {name: (jitted f, args)} that compile and run (once,
  warming them up); the others' errors go to ``row["failed"]``."""
  ok = {}
  for name, (f, args) in calls.items():
    try:
      jax.block_until_ready(f(*args))
      ok[name] = (f, args)
    except Exception as e:  # report and go on: one run covers all cells
      row["failed"][name] = f"{type(e).__name__}: {str(e)[:300]}"
      log(f"{name} failed: {row['failed'][name]}")
  return ok


def time_row(row, calls, flops, reps, min_ms):
  """Times ``calls`` together in interleaved bursts
  (benchmarks.timing.interleaved_samples) into ``row``: TFLOP/s of the
  median of ``reps`` per name, for ours the quartiles of the per-rep paired
  ratio peer time / ours (> 1: ours faster), and the best mosaic config."""
  samples, _ = interleaved_samples(calls, reps=reps, sample_s=min_ms / 1e3)
  peer = samples.get(row["peer"])
  for name, xs in samples.items():
    row[name] = flops / summarise(xs)[0] / 1e12
    if peer is not None and name.startswith(("mosaic[", "baseline[")):
      row["paired"][name] = paired_ratio(peer, xs)
  mosaic = {k: v for k, v in row.items() if k.startswith("mosaic[")}
  if mosaic:
    best = max(mosaic, key=mosaic.get)
    row["mosaic"], row["mosaic_cfg"] = mosaic[best], best[7:-1]


def _err_key(name):
  """'mosaic[bk128s2]' -> 'relerr[bk128s2]'."""
  return f"relerr{name[name.index('['):]}"


def bench(variants, with_tokamax: bool, baselines=(), head_dims=None,
          reps=15, min_ms=40.0, cells=None):
  """Per cell: every implementation compiled and warmed, then timed in
  interleaved bursts (``time_row``), median of `reps`."""
  rows = []
  warm_up()
  for h, t, causal in select_cells(cells, head_dims):
    b, n, (q, k, v), flops = cell_inputs(h, t, causal)
    row = cell_row(h, t, causal, b, n, "cudnn",
                   *fitting_configs(h, causal, t, variants))
    row["variants"].update({f"baseline[{name}]": "--baseline"
                            for name, _ in baselines})
    calls = warm_calls({name: (f, (q, k, v)) for name, f in cell_calls(
        h, t, causal, b, variants, with_tokamax, baselines).items()}, row)
    time_row(row, calls, flops, reps, min_ms)

    ref = calls["cudnn"][0](q, k, v).astype(jnp.float32) if "cudnn" in calls else None
    if ref is not None:  # every timed variant must agree with cuDNN
      out = None  # the default config's output
      for name, (f, args) in calls.items():
        if name.startswith(("mosaic[", "baseline[")):
          o = f(*args).astype(jnp.float32)
          out = o if name == "mosaic[default]" else out
          err = row[_err_key(name)] = rel_err(o, ref)
          if not err < 1e-2:
            log(f"FAIL {name}: rel err vs cuDNN {err:.2e}")
      if out is not None:
        row["rel_err_vs_cudnn"] = row["relerr[default]"]
        if h > 128:  # small cells: both against f32 truth
          r32 = f32_reference(q, k, v, causal)
          row["rel_err_f32_mosaic"] = rel_err(out, r32)
          row["rel_err_f32_cudnn"] = rel_err(ref, r32)
    log(json.dumps(row))
    rows.append(row)
    del q, k, v
  return rows


def fp8_fn(causal, config):
  """Ours on e4m3 inputs: jitted f(q8, k8, v8, qd, kd, vd) -> bf16 out."""
  def f(q, k, v, qd, kd, vd):
    return pf.flash_attention(q, k, v, is_causal=causal, q_descale=qd,
                              k_descale=kd, v_descale=vd,
                              implementation="mosaic", config=config)
  return jax.jit(f)


def fp8_calls(h, causal, quantized, configs) -> dict:
  """A cell's fp8 rows, jitted, on ``quantized`` = ((q8, qd), (k8, kd),
  (v8, vd)) (``pf.fp8.quantize`` per tensor): "cudnn-fp8" (``peers.cudnn_fp8``:
  P scaled by 2^8 as ours, O in e4m3 scaled by 1 / vd) and "mosaic[name]"
  per ``fitting_configs`` entry (``fp8_fn``)."""
  (q8, qd), (k8, kd), (v8, vd) = quantized
  fn, params = peers.cudnn_fp8(causal, h ** -0.5, s_scale=256.0)
  ours = (q8, k8, v8, qd, kd, vd)
  calls = {"cudnn-fp8": (jax.jit(fn), (q8, k8, v8, peers.cudnn_fp8_scaled(
      params, qd, kd, vd, 1.0 / vd)))}
  calls.update({f"mosaic[{name}]": (fp8_fn(causal, cfg), ours)
                for name, _, cfg in configs})
  return calls


def bench_fp8(variants, cells=None, head_dims=None, reps=15, min_ms=40.0,
              tokens=workloads.TOKENS, hidden=workloads.HIDDEN):
  """``bench`` for float8_e4m3fn q, k, v (each quantized per tensor from the
  cell's bf16 inputs): ours with the default config and each variant that
  fits against cuDNN's fp8 attention (``peers.cudnn_fp8``: P scaled by 2^8
  as ours, O in e4m3 scaled by 1 / v's descale, |O| <= amax(v)).  Each is
  checked against the float32 reference on the dequantized inputs first;
  one of ours over ``FWD_TOL`` is reported wrong, not timed (cuDNN's error
  is reported)."""
  tol = FWD_TOL["float8_e4m3fn"]
  rows = []
  warm_up()
  for h, t, causal in select_cells(cells, head_dims):
    b, n, (q, k, v), flops = cell_inputs(h, t, causal, tokens, hidden)
    quantized = tuple(pf.fp8.quantize(x) for x in (q, k, v))
    (q8, qd), (k8, kd), (v8, vd) = quantized
    del q, k, v
    configs, skipped = fitting_configs(h, causal, t, variants, fp8=True)
    row = cell_row(h, t, causal, b, n, "cudnn-fp8", configs, skipped,
                   dtype="fp8")
    o_scale = 1.0 / vd  # cuDNN's O (fp8_calls)
    calls = warm_calls(fp8_calls(h, causal, quantized, configs), row)
    ref = f32_reference(q8, k8, v8, causal, (qd, kd, vd))
    for name, (f, args) in list(calls.items()):  # checked before timing
      out = f(*args).astype(jnp.float32)
      if name == "cudnn-fp8":
        err = row["rel_err_f32_cudnn"] = rel_err(out / o_scale, ref)
      else:
        err = row[_err_key(name)] = rel_err(out, ref)
      if not err <= tol:
        log(f"FAIL {name}: rel err vs f32 {err:.2e} > {tol:g}")
        if name != "cudnn-fp8":
          row["failed"][name] = f"wrong: rel err vs f32 {err:.2e} > {tol:g}"
          del calls[name]
    del ref
    row["rel_err_f32_mosaic"] = row.get("relerr[default]")
    time_row(row, calls, flops, reps, min_ms)
    log(json.dumps(row))
    rows.append(row)
  return rows


def bench_packed(reps=9, min_ms=40.0, scale=1):
  """The packed-documents cell of benchmarks.run (segment ids: every visited
  tile is masked): the default config against the softmax overlap forced on.
  ``scale`` > 1 shrinks it (a CPU smoke run in interpret mode)."""
  w = next(x for x in workloads.real_models(scale=scale) if x.name == "packed")
  x = workloads.make_inputs(w)
  flops = workloads.flops(w, x.visible_pairs, "fwd")
  h = w.head_dim
  configs = {"default": None,
             "overlap": dataclasses.replace(
                 MosaicConfig.default(h, True, every_tile_masked=True),
                 overlap_softmax=True)}
  calls = {}
  for name, cfg in configs.items():
    f = jax.jit(lambda q, k, v, cfg=cfg: pf.flash_attention(
        q, k, v, is_causal=True, query_segment_ids=x.segment_ids,
        implementation="mosaic", config=cfg))
    jax.block_until_ready(f(x.q, x.k, x.v))
    calls[f"mosaic[{name}]"] = (f, (x.q, x.k, x.v))
  times = time_interleaved(calls, reps=reps, sample_s=min_ms / 1e3)
  outs = [f(*a).astype(jnp.float32) for f, a in calls.values()]
  row = {"workload": w.label, **{k: flops / sec / 1e12
                                 for k, (sec, _, _) in times.items()},
         "rel_diff": float(jnp.linalg.norm(outs[0] - outs[1])
                           / jnp.linalg.norm(outs[0]))}
  log(json.dumps(row))
  return row


def _cell_label(r):
  return (f"d{r['head_dim']} S{workloads._k(r['seqlen'])} "
          f"{'C' if r['causal'] else 'N'}"
          + (f" {r['dtype']}" if r.get("dtype", "bf16") != "bf16" else ""))


def table(rows):
  """Best mosaic config vs peers, then every variant (timed: TFLOP/s and the
  per-rep paired ratio to the cell's cuDNN; else why not)."""
  hdr = ("| cell | B x N | mosaic | cfg | cuDNN | ratio | tokamax | ratio | "
         "vs faster peer | rel err |")
  lines = [hdr, "|" + "---|" * 10]
  fmt = lambda x: "-" if x is None else f"{x:.0f}"
  rat = lambda a, b: "-" if a is None or b is None else f"{a / b:.2f}"
  err = lambda x: "-" if x is None else f"{x:.1e}"
  for r in rows:
    m, c, t = r.get("mosaic"), r.get(r.get("peer", "cudnn")), r.get("tokamax")
    lines.append(f"| {_cell_label(r)} | {r['batch']}x{r['heads']} | {fmt(m)} | "
                 f"{r.get('mosaic_cfg', '-')} | {fmt(c)} | {rat(m, c)} | "
                 f"{fmt(t)} | {rat(m, t)} | "
                 f"{rat(m, max((x for x in (c, t) if x is not None), default=None))} | "
                 f"{err(r.get('rel_err_vs_cudnn', r.get('rel_err_f32_mosaic')))} |")
  if not any(len(r.get("variants", {})) + len(r.get("skipped", ())) > 1
             for r in rows):
    return "\n".join(lines)
  lines += ["", "| cell | variant | cfg | TFLOP/s | cuDNN | ours / cuDNN, "
            "paired median [q25, q75] | rel err | not timed |",
            "|" + "---|" * 8]
  for r in rows:
    cell, c = _cell_label(r), r.get(r.get("peer", "cudnn"))
    for name, text in r.get("variants", {}).items():
      p = r.get("paired", {}).get(name)
      lines.append(
          f"| {cell} | {text} | {name} | {fmt(r.get(name))} | {fmt(c)} | "
          + ("-" if p is None else f"{p[1]:.3f} [{p[0]:.3f}, {p[2]:.3f}]")
          + f" | {err(r.get(_err_key(name)))} | "
          f"{r.get('failed', {}).get(name, '')[:160]} |")
    for text, reason in r.get("skipped", ()):
      lines.append(f"| {cell} | {text} | - | - | {fmt(c)} | - | - | "
                   f"skipped: {reason[:160]} |")
    for name, reason in r.get("failed", {}).items():
      if name not in r.get("variants", {}):  # a peer
        lines.append(f"| {cell} | (peer) | {name} | - | - | - | - | "
                     f"{reason[:160]} |")
  return "\n".join(lines)


def parse_args(argv=None):
  ap = argparse.ArgumentParser()
  ap.add_argument("--bench", action="store_true")
  ap.add_argument("--variant", action="append", default=[],
                  help="also time the default config with these fields "
                  "replaced, e.g. persistent=True,block_kv=64 "
                  "(repeatable)")
  ap.add_argument("--dtype", choices=("bf16", "fp8"), default="bf16",
                  help="fp8: float8_e4m3fn q, k, v (per-tensor descales) "
                  "against cuDNN's fp8 attention")
  ap.add_argument("--tokamax", action="store_true")
  ap.add_argument("--packed", action="store_true",
                  help="also time the packed-documents cell: default config "
                  "vs softmax overlap on")
  ap.add_argument("--baseline", action="append", default=[],
                  help="a saved copy of mosaic/forward.py, timed beside the "
                  "current one (repeatable)")
  ap.add_argument("--head-dims", default="",
                  help="comma-separated head dims to run (default: all cells)")
  ap.add_argument("--cells", default="",
                  help="comma-separated cells d<H>-<T>[k]-N|C, e.g. "
                  "d128-4k-N,d128-16k-C (default: all of CELLS)")
  ap.add_argument("--reps", type=int, default=15,
                  help="timed reps (interleaved bursts) per cell")
  ap.add_argument("--out", default=os.environ.get("OUT"))
  args = ap.parse_args(argv)
  if args.dtype == "fp8" and (args.tokamax or args.baseline or args.packed):
    ap.error("--dtype fp8 takes no --tokamax, --baseline or --packed")
  try:
    args.cells = parse_cells(args.cells)
  except ValueError as e:
    ap.error(str(e))
  args.head_dims = [int(x) for x in args.head_dims.split(",") if x]
  args.variant = [parse_variant(v) for v in args.variant]
  return args


def main(argv=None):
  args = parse_args(argv)
  dev = jax.devices()[0]
  log(f"# {datetime.date.today()} {dev.device_kind} jax {jax.__version__}")
  if args.bench:
    if args.dtype == "fp8":
      rows = bench_fp8(args.variant, args.cells, args.head_dims, args.reps)
    else:
      bases = [(os.path.splitext(os.path.basename(p))[0], load_baseline(p))
               for p in args.baseline]
      rows = bench(args.variant, args.tokamax, bases, args.head_dims,
                   args.reps, cells=args.cells)
    log(table(rows))
    if args.out:
      os.makedirs(args.out, exist_ok=True)
      name = "mosaic_bench" + ("_fp8" if args.dtype == "fp8" else "")
      with open(os.path.join(args.out, name + ".json"), "w") as f:
        json.dump({"date": str(datetime.date.today()),
                   "device": dev.device_kind, "jax": jax.__version__,
                   "rows": rows}, f, indent=1)
  if args.packed:
    bench_packed()


if __name__ == "__main__":
  main()
