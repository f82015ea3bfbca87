"""Mosaic GPU forward: TFLOP/s against
cuDNN (``jax.nn.dot_product_attention(implementation="cudnn")``) and, when
its wheels are importable, tokamax's Mosaic forward, in the same process on
the same inputs.

Workload (FlashAttention papers): B * T = 16384 tokens, hidden 2048, heads =
2048 / H; forward FLOPs 4 * B * N * T * S * H, halved when causal.

  PYTHONPATH=$PWD python3 benchmarks/mosaic_bench.py [--bench]
      [--variant persistent=True,...] [--tokamax] [--packed]
      [--baseline OLD_FORWARD.py] [--head-dims 64,128] [--out DIR]

Prints a short table last; with --out writes a log and a JSON of results.
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

from benchmarks import workloads
from benchmarks.timing import time_interleaved
import pallas_flash as pf
from pallas_flash import masks, reference
from pallas_flash.mosaic import forward as mosaic_forward
from pallas_flash.mosaic.config import MosaicConfig
from pallas_flash.params import KernelParams

CELLS = [  # (head_dim, seqlen, causal)
    (64, 4096, False), (64, 4096, True), (64, 16384, False), (64, 16384, True),
    (128, 4096, False), (128, 4096, True), (128, 16384, False),
    (128, 16384, True), (256, 1024, False), (256, 1024, True),
]
_C = MosaicConfig


def variant_configs(h, causal, seqlen, variants):
  """The default config of a cell, then the default with each variant's
  fields replaced, e.g. {"persistent": False}.  (Earlier sweeps of tile width,
  visiting order, softmax overlap and launch order settled the table in
  pallas_flash/mosaic/config.py; docs/design.md gives the deciding figures,
  docs/mosaic.md as of commit 29bf24f the runs.)"""
  cfg = _C.default(h, causal, kv_seqlen=seqlen)
  return [None] + [dataclasses.replace(cfg, **v) for v in variants]


def parse_variant(text):
  """'persistent=True,block_kv=64' -> {'persistent': True, 'block_kv': 64}."""
  return {k: ast.literal_eval(v) for k, v in
          (item.split("=", 1) for item in text.split(","))}


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


def cell_workload(h, t, causal) -> workloads.Workload:
  """A cell as the shared workload description: the convention's bf16 cell
  (B x T = 16384 tokens, hidden 2048, N = 2048 / H) up to 16k tokens; beyond,
  one sequence of 16 heads (issue 12's long-context cell)."""
  if t <= workloads.TOKENS:
    return workloads.convention(seqlens=(t,), head_dims=(h,),
                                causals=(causal,), dtypes=("bfloat16",))[0]
  return workloads.long_context(seqlen=t, head_dim=h, causal=causal)[0]


def cell_inputs(h, t, causal):
  """(b, n, (q, k, v) bf16 [B, T, N, H], forward FLOPs) of a cell
  (``workloads.make_inputs`` of ``cell_workload``)."""
  w = cell_workload(h, t, causal)
  x = workloads.make_inputs(w)
  return (w.batch, w.heads, (x.q, x.k, x.v),
          workloads.flops(w, x.visible_pairs, "fwd"))


def full_arrays(b, t, s):
  return masks.MaskArrays(jnp.full((b,), t, jnp.int32),
                          jnp.full((b,), s, jnp.int32))


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
          f"{'c3' if cfg.consumers == 3 else ''}")


def cell_calls(h, t, causal, b, variants, with_tokamax: bool, baselines=()):
  """{name: jitted f(q, k, v) -> out} of one cell: cuDNN, ours (the default
  config and each variant that fits in shared memory), saved baselines and,
  when importable, tokamax."""
  arrays, spec = full_arrays(b, t, t), masks.MaskSpec(is_causal=causal)
  calls = {"cudnn": jax.jit(lambda q, k, v: jax.nn.dot_product_attention(
      q, k, v, is_causal=causal, implementation="cudnn"))}
  ours = [(f"mosaic[{_cfg_name(cfg)}]", mosaic_fn(spec, h ** -0.5, None, cfg))
          for cfg in variant_configs(h, causal, t, variants)
          if cfg is None or cfg.smem_bytes(h) <= 227 * 1024]
  ours += [(f"baseline[{name}]", mosaic_fn(spec, h ** -0.5, module=module))
           for name, module in baselines]
  for name, f in ours:
    calls[name] = jax.jit(lambda q, k, v, f=f: f(q, k, v, arrays)[0])
  if with_tokamax and (tk := tokamax_fn(causal)) is not None:
    calls["tokamax"] = tk
  return calls


def bench(variants, with_tokamax: bool, baselines=(), head_dims=None,
          reps=15, min_ms=40.0):
  """Per cell: every implementation compiled and warmed, then timed in
  interleaved bursts (benchmarks.timing.time_interleaved), median of `reps`."""
  rows = []
  # Bring the GPU to its running clocks before the first cell (the first cell
  # of a fresh process measured low for some implementations otherwise).
  x = jnp.ones((8192, 8192), jnp.bfloat16)
  mm = jax.jit(lambda x: x @ x)
  jax.block_until_ready(mm(x))
  time_interleaved({"warm-up": (mm, (x,))}, reps=5, sample_s=0.2)
  del x
  for h, t, causal in CELLS:
    if head_dims and h not in head_dims:
      continue
    b, n, (q, k, v), flops = cell_inputs(h, t, causal)
    arrays = full_arrays(b, t, t)
    spec = masks.MaskSpec(is_causal=causal)
    row = {"head_dim": h, "seqlen": t, "causal": causal, "batch": b, "heads": n}
    calls = {}  # name -> (jitted f, (q, k, v)): those that compiled
    for name, f in cell_calls(h, t, causal, b, variants, with_tokamax,
                              baselines).items():
      try:
        jax.block_until_ready(f(q, k, v))  # compile + warm up
        calls[name] = (f, (q, k, v))
      except Exception as e:  # report and go on: one run covers all cells
        log(f"{name} failed: {type(e).__name__}: {str(e)[:300]}")

    times = time_interleaved(calls, reps=reps, sample_s=min_ms / 1e3)
    for name, (sec, _, _) in times.items():
      row[name] = flops / sec / 1e12
    mosaic = {k: v for k, v in row.items() if k.startswith("mosaic[")}
    if mosaic:
      best = max(mosaic, key=mosaic.get)
      row["mosaic"], row["mosaic_cfg"] = mosaic[best], best[7:-1]

    ref = calls["cudnn"][0](q, k, v).astype(jnp.float32) if "cudnn" in calls else None
    if ref is not None:  # every timed variant must agree with cuDNN
      out = None  # the default config's output
      for name, (f, args) in calls.items():
        if name.startswith(("mosaic[", "baseline[")):
          o = f(*args).astype(jnp.float32)
          out = o if name == "mosaic[default]" else out
          err = float(jnp.linalg.norm(o - ref) / jnp.linalg.norm(ref))
          row[f"relerr{name[name.index('['):]}"] = err
          if not err < 1e-2:
            log(f"FAIL {name}: rel err vs cuDNN {err:.2e}")
      if out is not None:
        row["rel_err_vs_cudnn"] = row["relerr[default]"]
        if h > 128:  # small cells: both against f32 truth
          f32 = lambda x: x.astype(jnp.float32)
          r32, _ = reference.attention(f32(q), f32(k), f32(v), arrays,
                                       spec=spec, scale=h ** -0.5,
                                       logits_soft_cap=None)
          r32 = r32.astype(jnp.float32)
          nrm = jnp.linalg.norm(r32)
          row["rel_err_f32_mosaic"] = float(jnp.linalg.norm(out - r32) / nrm)
          row["rel_err_f32_cudnn"] = float(jnp.linalg.norm(ref - r32) / nrm)
    log(json.dumps(row))
    rows.append(row)
    del q, k, v
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


def table(rows):
  """Best mosaic config vs peers, then every timed variant as a ratio to cuDNN."""
  hdr = ("| cell | B x N | mosaic | cfg | cuDNN | ratio | tokamax | ratio | "
         "vs faster peer | rel err |")
  lines = [hdr, "|" + "---|" * 10]
  variants = []
  for r in rows:
    cell = f"d{r['head_dim']} S{r['seqlen'] // 1024}k {'C' if r['causal'] else 'N'}"
    m, c, t = r.get("mosaic"), r.get("cudnn"), r.get("tokamax")
    fmt = lambda x: "-" if x is None else f"{x:.0f}"
    rat = lambda a, b: "-" if a is None or b is None else f"{a / b:.2f}"
    lines.append(f"| {cell} | {r['batch']}x{r['heads']} | {fmt(m)} | "
                 f"{r.get('mosaic_cfg', '-')} | {fmt(c)} | {rat(m, c)} | "
                 f"{fmt(t)} | {rat(m, t)} | "
                 f"{rat(m, max((x for x in (c, t) if x is not None), default=None))} | "
                 f"{r.get('rel_err_vs_cudnn', 0):.1e} |")
    timed = [(k, v) for k, v in r.items()
             if k.startswith(("mosaic[", "baseline[")) and v is not None]
    if len(timed) > 1:
      variants.append(f"{cell}: " + ", ".join(
          f"{k} {v:.0f} ({rat(v, c)})" for k, v in timed))
  return "\n".join(lines + (["", "variants (TFLOP/s, ratio to cuDNN):"]
                             + variants if variants else []))


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--bench", action="store_true")
  ap.add_argument("--variant", action="append", default=[],
                  help="also time the default config with these fields "
                  "replaced, e.g. persistent=True,block_kv=64 "
                  "(repeatable)")
  ap.add_argument("--tokamax", action="store_true")
  ap.add_argument("--packed", action="store_true",
                  help="also time the packed-documents cell: default config "
                  "vs softmax overlap on")
  ap.add_argument("--baseline", action="append", default=[],
                  help="a saved copy of mosaic/forward.py, timed beside the "
                  "current one (repeatable)")
  ap.add_argument("--head-dims", default="",
                  help="comma-separated head dims to run (default: all cells)")
  ap.add_argument("--out", default=os.environ.get("OUT"))
  args = ap.parse_args()
  dev = jax.devices()[0]
  log(f"# {datetime.date.today()} {dev.device_kind} jax {jax.__version__}")
  if args.bench:
    bases = [(os.path.splitext(os.path.basename(p))[0], load_baseline(p))
             for p in args.baseline]
    dims = [int(x) for x in args.head_dims.split(",") if x]
    rows = bench([parse_variant(v) for v in args.variant], args.tokamax,
                 bases, dims)
    log(table(rows))
    if args.out:
      os.makedirs(args.out, exist_ok=True)
      with open(os.path.join(args.out, "mosaic_bench.json"), "w") as f:
        json.dump({"date": str(datetime.date.today()),
                   "device": dev.device_kind, "jax": jax.__version__,
                   "rows": rows}, f, indent=1)
  if args.packed:
    bench_packed()


if __name__ == "__main__":
  main()
