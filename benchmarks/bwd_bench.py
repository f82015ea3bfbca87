"""Backward (training) TFLOP/s of pallas_flash against cuDNN and tokamax.

Each cell of the FlashAttention workload (B * T = 16384 tokens, hidden 2048,
bf16) times, in one process on the same inputs and in interleaved bursts
(``benchmarks.timing.interleaved_samples``), the forward alone and forward +
backward of: ours (``implementation="mosaic"``: Mosaic forward and, for head
dims <= 128, the Mosaic backward; plus each ``--variant`` of the backward
config; a field only the forward config has, or one written ``fwd.``, as
``fwd.consumers=3``, goes to the forward's), ours with the Pallas-Triton
kernels (``implementation="triton"``),
cuDNN (``jax.nn.dot_product_attention``; also as ``cudnn det``, compiled with
``xla_gpu_deterministic_ops=True``, cuDNN's deterministic backward, the
guarantee our default gives) and tokamax's Mosaic kernels when importable.
Backward time = (fwd+bwd) - fwd; backward FLOPs = 2.5 x forward FLOPs
(causal halved).  The gradients of every implementation are checked
against cuDNN's (relative L2 error) before timing.

  PYTHONPATH=$PWD python3 benchmarks/bwd_bench.py [--cells d128-16k-C,...]
      [--variant block_q_dkv=128,num_stages=3 ...] [--alibi] [--bias]
      [--dropout 0.1] [--only "ours,ours alibi,cudnn"] [--out DIR]

``--alibi`` adds ours and ours-triton with ALiBi slopes (Press et al.'s
2^(-8 i / N)); their gradients are checked against each other, and ALiBi's
cost is ours alibi against ours in the same run.  The variants take ALiBi
too (and ``--dropout``'s rate, and ``--bias``'s bias), from the configs
the dispatcher picks for those features.

``--bias`` adds a [1, N, T, S] bf16 bias (normal x 0.5) as an argument,
differentiated, to ours (the Mosaic kernels' bias rings and dbias), triton
and cuDNN (``ours bias``, ``triton bias``, ``cudnn bias``); the variants
take it too: their fields replace those of the configs the dispatcher
picks for a bias (the defaults' ``with_bias``; a config given explicitly
is not adapted, so without this a variant's backward would not fit its
bias ring and fall back to triton).  Their gradients, dbias included, are
checked against ``cudnn bias``'s; the bias's cost is ours bias against
ours in the same run (issue 50: fwd+bwd >= 0.8).

Every other ``ours...`` row also gets paired ratios (``paired_vs_ours``): per
rep, its base's time over the row's for the forward, fwd+bwd and the
backward (fwd+bwd minus forward within the rep), as median and quartiles;
above 1 the row is faster.  A feature row's base is ``ours``; a variant's is
the row of the one feature it takes (``ours alibi`` under ``--alibi``), else
``ours``.  The samples of a rep are one pass in random order, so drift
cancels, and a variant's gain is read far finer than from two medians (whose
spreads reach 10-20%).

Prints a short table last; with --out writes a log and a JSON of results.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import re

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import mosaic_bench, peers
from benchmarks.mosaic_bench import cell_inputs, log, parse_variant, tokamax_fn
from benchmarks.timing import interleaved_samples, paired_ratio, summarise
from benchmarks.workloads import alibi_slopes
import pallas_flash as pf
from pallas_flash.mosaic.config import MosaicBackwardConfig, MosaicConfig

# (head_dim, seqlen, causal): the forward's cells, d256 at S4k and the
# long-context cell (B1, 16 heads) of issue 12.
CELLS = [*mosaic_bench.CELLS, (256, 4096, False), (256, 4096, True),
         (128, 131072, True)]


def cell_name(h, t, causal):
  return f"d{h}-{t // 1024}k-{'C' if causal else 'N'}"



def _ours(causal, implementation, config=None, **kw):
  """f(q, k, v[, bias])."""
  return lambda q, k, v, *bias: pf.flash_attention(
      q, k, v, *bias, is_causal=causal, implementation=implementation,
      config=config, **kw)


def takes_bias(name: str, bias: bool) -> bool:
  """Whether ``cell_impls``'s ``name`` is called with the bias."""
  return name.endswith(" bias") or (bias and name.startswith("ours["))


_BWD_FIELDS = {f.name for f in dataclasses.fields(MosaicBackwardConfig)}


def split_variant(v):
  """A --variant's fields -> (forward config's, backward config's): a field
  of the backward config goes there unless written ``fwd.``."""
  fwd = {k.removeprefix("fwd."): x for k, x in v.items()
         if k.startswith("fwd.") or k not in _BWD_FIELDS}
  return fwd, {k: x for k, x in v.items() if k in _BWD_FIELDS}


def variant_config(h, causal, t, v, dropout=0.0, bias=False,
                   alibi=False) -> MosaicConfig:
  """A --variant's whole config: its fields over the defaults the
  dispatcher picks for the cell and its features (with ``bias``: their
  ``with_bias``, a bf16 bias's, since an explicit config is not adapted
  to the bias)."""
  fwd_cfg = MosaicConfig.default(h, causal, kv_seqlen=t,
                                 dropout=dropout > 0.0, alibi=alibi,
                                 bias=bias)
  bwd_cfg = MosaicBackwardConfig.default(h, causal, dropout > 0.0,
                                         alibi=alibi)
  if bias:
    fwd_cfg = fwd_cfg.with_bias(h, causal=causal)
    bwd_cfg = bwd_cfg.with_bias(h)
  fwd_v, bwd_v = split_variant(v)
  return dataclasses.replace(fwd_cfg, **fwd_v,
                             backward=dataclasses.replace(bwd_cfg, **bwd_v))


def cell_impls(h, t, causal, variants, n, alibi, dropout=0.0, bias=False):
  """{name: f(q, k, v[, bias]) -> out}: ours (default and variants),
  triton, cuDNN, tokamax; with ``alibi`` also ours and triton with ALiBi;
  with ``dropout`` also ours and triton with that rate; with ``bias`` also
  ours, triton and cuDNN called with the bias (``takes_bias``).  The
  variants take every feature given (``variant_config``)."""
  impls = {"ours": _ours(causal, "mosaic")}
  if bias:
    impls["ours bias"] = _ours(causal, "mosaic")
    impls["triton bias"] = _ours(causal, "triton")
    impls["cudnn bias"] = lambda q, k, v, b: jax.nn.dot_product_attention(
        q, k, v, bias=b, is_causal=causal, implementation="cudnn")
  drop = (dict(dropout_rate=dropout, dropout_rng=jax.random.key(7))
          if dropout else {})
  if dropout:
    impls["ours dropout"] = _ours(causal, "mosaic", **drop)
    impls["triton dropout"] = _ours(causal, "triton", **drop)
  if alibi:
    impls["ours alibi"] = _ours(causal, "mosaic",
                                alibi_slopes=alibi_slopes(n))
    impls["triton alibi"] = _ours(causal, "triton",
                                  alibi_slopes=alibi_slopes(n))
  slopes = dict(alibi_slopes=alibi_slopes(n)) if alibi else {}
  for v in variants:
    name = "ours[" + ",".join(f"{k}={x}" for k, x in v.items()) + "]"
    impls[name] = _ours(causal, "mosaic",
                        variant_config(h, causal, t, v, dropout, bias, alibi),
                        **drop, **slopes)
  impls["triton"] = _ours(causal, "triton")
  impls["cudnn"] = lambda q, k, v: jax.nn.dot_product_attention(
      q, k, v, is_causal=causal, implementation="cudnn")
  impls["cudnn det"] = impls["cudnn"]  # compiled with COMPILE_OPTIONS
  if (tk := tokamax_fn(causal)) is not None:
    impls["tokamax"] = tk
  return impls


# cuDNN's backward is deterministic only when XLA requires determinism;
# ours is by default.  The options are those of run.py's ``cudnn-det`` peer.
COMPILE_OPTIONS = {"cudnn det": peers.IMPLS["cudnn-det"].compile_options}


def fwd_bwd(f):
  """jit of (*inputs, do) -> the gradients of every input."""
  def g(*args):
    *inputs, do = args
    out, vjp = jax.vjp(f, *inputs)
    return vjp(do)
  return jax.jit(g)


@jax.jit
def _rel_l2(a, b):  # one fusion: no f32 copy of a 16k x 16k dbias
  a, b = a.astype(jnp.float32), b.astype(jnp.float32)
  return jnp.sqrt(jnp.sum(jnp.square(a - b)) / jnp.sum(jnp.square(b)))


def rel_l2(a, b):
  """||a - b|| / ||b|| in f32."""
  return float(_rel_l2(a, b))


def variant_features(dropout: float, bias: bool, alibi: bool) -> list[str]:
  """The features the variant rows take (``cell_impls``: every one given)."""
  return [f for f, on in (("bias", bias), ("dropout", dropout),
                          ("alibi", alibi)) if on]


def reference(name: str, dropout: float = 0.0, bias: bool = False,
              alibi: bool = False):
  """The row whose gradients ``name``'s are checked against (None: none):
  cuDNN's; ALiBi rows triton's ALiBi, dropout rows triton's dropout (the
  same keep bits), rows with the bias cuDNN's with the bias (dbias too).
  A variant takes the reference of its one feature; one with several
  features (no such reference row) is not checked."""
  if name in ("triton alibi", "triton dropout", "cudnn bias"):
    return None
  if name.startswith("ours["):
    features = variant_features(dropout, bias, alibi)
    refs = {"bias": "cudnn bias", "dropout": "triton dropout",
            "alibi": "triton alibi"}
    return "cudnn" if not features else (
        refs[features[0]] if len(features) == 1 else None)
  if takes_bias(name, bias):
    return "cudnn bias"
  if "dropout" in name:
    return "triton dropout"
  if "alibi" in name:
    return "triton alibi"
  return "cudnn"


def bias_input(n, t):
  """``--bias``'s [1, N, T, T] bf16 bias, normal x 0.5."""
  return 0.5 * jax.random.normal(jax.random.key(98), (1, n, t, t),
                                 jnp.bfloat16)


def bench_cell(h, t, causal, variants, reps, min_ms, alibi=False, only=(),
               dropout=0.0, bias=False):
  b, n, (q, k, v), flops = cell_inputs(h, t, causal)
  do = jax.random.normal(jax.random.key(99), q.shape, jnp.bfloat16)
  bias_arr = bias_input(n, t) if bias else None
  impls = {name: f for name, f in cell_impls(h, t, causal, variants, n, alibi,
                                             dropout, bias).items()
           if not only or name in only}
  refs = {name: reference(name, dropout, bias, alibi) for name in impls}
  # The references first, their gradients kept; every other row's compared
  # as it comes and dropped (a [1, N, T, S] dbias is 8 GiB at S16k N16).
  order = sorted(impls, key=lambda name: name not in refs.values())
  calls, errors, rows, kernels, kept = {}, {}, [], {}, {}
  for name in order:
    f = impls[name]
    args = (q, k, v, bias_arr) if takes_bias(name, bias) else (q, k, v)
    try:
      options = COMPILE_OPTIONS.get(name)
      fb = fwd_bwd(f).lower(*args, do).compile(options)
      fw = jax.jit(f).lower(*args).compile(options)
      kernels[name] = mosaic_bench.mosaic_kernels(fb)  # ours: 1 = fell back
      grads = jax.block_until_ready(fb(*args, do))
      if name in refs.values():
        kept[name] = grads
      ref = kept.get(refs[name])
      errors[name] = (float("nan") if ref is None else
                      max(rel_l2(g, r) for g, r in zip(grads, ref)))
      del grads
      calls[name] = (fw, args)
      calls[name + " fb"] = (fb, (*args, do))
    except Exception as e:  # a variant that does not fit / lower
      log(f"  {name}: failed: {type(e).__name__}: {str(e)[:300]}")
  del kept
  errors = {name: errors[name] for name in impls if name in errors}  # rows
  # in cell_impls' order, not the references-first order they ran in
  samples, _ = interleaved_samples(calls, reps, min_ms / 1e3)
  times = {name: summarise(xs) for name, xs in samples.items()}
  features = variant_features(dropout, bias, alibi)
  paired = paired_vs_ours(
      samples, "ours " + features[0] if len(features) == 1 else "ours")
  for name in errors:
    fwd_s, fb_s = times[name][0], times[name + " fb"][0]
    bwd_s = fb_s - fwd_s
    rows.append(dict(
        cell=cell_name(h, t, causal), impl=name, b=b, n=n,
        fwd_tflops=flops / fwd_s / 1e12, bwd_tflops=2.5 * flops / bwd_s / 1e12,
        fwdbwd_tflops=3.5 * flops / fb_s / 1e12, fwd_ms=fwd_s * 1e3,
        bwd_ms=bwd_s * 1e3, fwdbwd_ms=fb_s * 1e3,
        spread=max(times[name][1], times[name + " fb"][1]),
        grad_err_vs_cudnn=errors[name], mosaic_kernels=kernels[name],
        paired_vs_ours=paired.get(name)))
    r = rows[-1]
    log(f"  {name:28s} fwd {r['fwd_tflops']:6.1f}  bwd {r['bwd_tflops']:6.1f}"
        f"  fwd+bwd {r['fwdbwd_tflops']:6.1f} TFLOP/s  grad err "
        f"{r['grad_err_vs_cudnn']:.1e}  spread {r['spread']:.2f}  "
        f"mosaic kernels {r['mosaic_kernels']}")
    if name in paired:
      log("  " + " " * 28 + "  ".join(
          f"{m} {q50:.3f} [{q25:.3f}, {q75:.3f}]" for m, (q25, q50, q75)
          in paired[name].items()) + "  (base / this, paired)")
  return rows


def paired_vs_ours(samples: dict, variant_base: str = "ours") -> dict:
  """{row: {"fwd" | "bwd" | "fwdbwd": (q25, median, q75)}} of a base row's
  time over each other ``ours...`` row's, rep by rep, from
  ``interleaved_samples`` (an entry ``name`` is the forward, ``name + " fb"``
  fwd+bwd).  The variants (``ours[...]``) against ``variant_base`` (the row
  with the features they take, as ``ours alibi``), the feature rows against
  ``ours``; a row whose base was not timed gets none."""
  def times(name):
    fw = np.asarray(samples[name], np.float64)
    fb = np.asarray(samples[name + " fb"], np.float64)
    return {"fwd": fw, "bwd": fb - fw, "fwdbwd": fb}
  timed = {name for name in samples
           if not name.endswith(" fb") and name + " fb" in samples}
  out = {}
  for name in sorted(timed):
    base = variant_base if name.startswith("ours[") else "ours"
    if not name.startswith("ours") or name == base or base not in timed:
      continue
    b, row = times(base), times(name)
    out[name] = {m: paired_ratio(b[m], row[m]) for m in ("fwd", "bwd", "fwdbwd")}
  return out


def table(rows):
  """Per cell: our backward and fwd+bwd against the faster peer."""
  lines = ["| cell | ours bwd | cuDNN bwd | tokamax bwd | triton bwd | "
           "ours/best bwd | ours/cuDNN fwd+bwd | cuDNN det bwd | "
           "ours/cuDNN det bwd |", "|---" * 9 + "|"]
  by_cell = {}
  for r in rows:
    by_cell.setdefault(r["cell"], {})[r["impl"]] = r
  for cell, rs in by_cell.items():
    get = lambda name, key: rs[name][key] if name in rs else float("nan")
    best = max(get("cudnn", "bwd_tflops"),
               get("tokamax", "bwd_tflops") if "tokamax" in rs else 0)
    lines.append(
        f"| {cell} | {get('ours', 'bwd_tflops'):.0f} | "
        f"{get('cudnn', 'bwd_tflops'):.0f} | {get('tokamax', 'bwd_tflops'):.0f}"
        f" | {get('triton', 'bwd_tflops'):.0f} | "
        f"{get('ours', 'bwd_tflops') / best:.2f} | "
        f"{get('ours', 'fwdbwd_tflops') / get('cudnn', 'fwdbwd_tflops'):.2f} | "
        f"{get('cudnn det', 'bwd_tflops'):.0f} | "
        f"{get('ours', 'bwd_tflops') / get('cudnn det', 'bwd_tflops'):.2f} |")
  if any(r["impl"] == "ours bias" for r in rows):
    lines += ["", "| cell | bias / none fwd+bwd (goal 0.8) | cuDNN bias / ours "
              "bias fwd+bwd (goal 1.5) | best variant with bias / none "
              "fwd+bwd |", "|---" * 4 + "|"]
    for cell, rs in by_cell.items():
      if "ours bias" not in rs or "ours" not in rs:
        continue
      ours = rs["ours"]["fwdbwd_ms"]
      variants = [r["fwdbwd_ms"] for name, r in rs.items()
                  if name.startswith("ours[")]
      best = (f"{ours / min(variants):.2f}" if variants else "-")
      cudnn = (f"{rs['cudnn bias']['fwdbwd_ms'] / rs['ours bias']['fwdbwd_ms']:.2f}"
               if "cudnn bias" in rs else "-")
      lines.append(f"| {cell} | {ours / rs['ours bias']['fwdbwd_ms']:.2f} | "
                   f"{cudnn} | {best} |")
  if any(r["impl"] == "ours alibi" for r in rows):
    lines += ["", "| cell | ALiBi / none fwd | ALiBi / none fwd+bwd | "
              "ours ALiBi / triton ALiBi fwd+bwd |", "|---" * 4 + "|"]
    for cell, rs in by_cell.items():
      if "ours alibi" not in rs:
        continue
      ratio = lambda a, b, key: (rs[a][key] / rs[b][key] if b in rs
                                 else float("nan"))
      lines.append(
          f"| {cell} | {ratio('ours alibi', 'ours', 'fwd_tflops'):.2f} | "
          f"{ratio('ours alibi', 'ours', 'fwdbwd_tflops'):.2f} | "
          f"{ratio('ours alibi', 'triton alibi', 'fwdbwd_tflops'):.2f} |")
  return "\n".join(lines)


def parse_only(text: str) -> tuple[str, ...]:
  """--only's names, split at the commas outside brackets (a variant's name
  has commas inside them: ours[a=1,b=2])."""
  return tuple(filter(None, re.split(r",(?![^\[]*\])", text)))


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--cells", default="",
                  help="comma-separated cell names (d128-16k-C, ...); all "
                  "by default")
  ap.add_argument("--variant", action="append", default=[],
                  help="backward config fields, e.g. block_q_dkv=128")
  ap.add_argument("--reps", type=int, default=11)
  ap.add_argument("--min-ms", type=float, default=40.0)
  ap.add_argument("--alibi", action="store_true",
                  help="also ours and triton with ALiBi slopes")
  ap.add_argument("--bias", action="store_true",
                  help="also ours, triton and cuDNN with a [1, N, T, S] "
                  "bias (dbias too); the variants take it too")
  ap.add_argument("--dropout", type=float, default=0.0,
                  help="also ours and triton with this dropout rate; the "
                  "variants take it too")
  ap.add_argument("--only", default="",
                  help="comma-separated implementations to run (e.g. "
                  "'ours,ours alibi,cudnn'); all by default")
  ap.add_argument("--out", default="")
  args = ap.parse_args()
  only = parse_only(args.only)
  variants = [parse_variant(v) for v in args.variant]
  wanted = set(filter(None, args.cells.split(",")))
  log(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
      f"{jax.devices()[0].device_kind}, jax {jax.__version__}")
  rows = []
  for h, t, causal in CELLS:
    if wanted and cell_name(h, t, causal) not in wanted:
      continue
    log(cell_name(h, t, causal))
    rows += bench_cell(h, t, causal, variants, args.reps, args.min_ms,
                       args.alibi, only, args.dropout, args.bias)
  text = table(rows)
  log(text)
  if args.out:
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bwd_bench.json"), "w") as f:
      json.dump(dict(device=jax.devices()[0].device_kind,
                     jax=jax.__version__, rows=rows), f, indent=1)
    with open(os.path.join(args.out, "bwd_table.md"), "w") as f:
      f.write(text + "\n")


if __name__ == "__main__":
  main()
