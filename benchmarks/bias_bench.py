"""Bias (with dbias), ALiBi and dropout speed of the Pallas-Triton kernels
against cuDNN and PyTorch SDPA (issue 14).

Cells: bf16, head dim 128, 16 heads, B x T = 16384 tokens (S = 4k: B = 4;
S = 16k: B = 1), causal and not.  Per cell, in one process on the same
inputs and in interleaved bursts (``benchmarks.timing.interleaved_samples``),
forward and forward + backward of:

* ``triton``: ours (``implementation="triton"``), no bias: the baseline;
* ``triton bias``: a [1, N, T, S] bias, gradients of q, k, v and the bias;
* ``cudnn bias``: ``jax.nn.dot_product_attention(implementation="cudnn",
  bias=...)``, the same gradients;
* ``cudnn``: cuDNN without bias;
* ``triton alibi``: ALiBi slopes (no N x N input);
* ``triton dropout``: dropout 0.1;
* ``mosaic`` / ``mosaic dropout``: the Mosaic GPU kernels (Hopper) without /
  with dropout 0.1 (their gradients are compared with ``triton dropout``'s:
  the same keep bits); ``mosaic alibi``: with ALiBi slopes;
* ``mosaic bias``: the [1, N, T, S] bias through the Mosaic kernels' bias
  rings (the default path on Hopper: the Mosaic forward, and the Mosaic
  backward, whose dQ kernel writes dbias), against
  ``mosaic`` without a bias (issue 50: >= 0.8x) and ``cudnn bias`` (>= 1.5x);
* ``torch flash`` / ``torch flash dropout``: PyTorch SDPA's flash kernel
  (``SDPBackend.FLASH_ATTENTION``) without / with dropout 0.1, timed with
  CUDA events, when torch with CUDA is importable.

TFLOP/s count the attention matmuls only: forward 4 B N T S H (causal
halved), forward + backward 3.5 x that.  Before timing, the bias outputs and
gradients (dbias included) of ours are compared with cuDNN's (relative L2).

  PYTHONPATH=$PWD python3 benchmarks/bias_bench.py [--cells 4k-N,16k-C] [--out DIR]
      [--impls triton,triton-dropout,torch]  (a subset of the rows; "torch":
      both torch rows; names with "-" for " ")
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import workloads
from benchmarks.bwd_bench import rel_l2
from benchmarks.timing import interleaved_samples, paired_ratio, summarise
import pallas_flash as pf

H, N, TOKENS, RATE = 128, 16, 16384, 0.1
CELLS = [(4096, False), (4096, True), (16384, True), (16384, False)]


def log(*a):
  print(*a, flush=True)


def cell_name(t, causal):
  return f"{t // 1024}k-{'C' if causal else 'N'}"


def fwd_bwd(f, nargs):
  """jit of (args..., do) -> grads of ``f`` w.r.t. its first ``nargs`` args."""
  def g(*args):
    *xs, do = args
    _, vjp = jax.vjp(f, *xs[:nargs])
    return vjp(do)
  return jax.jit(g)


def jax_impls(causal, t):
  slopes = workloads.alibi_slopes(N)  # ALiBi paper's
  rng = jax.random.key(0)
  ours = lambda impl, **kw: (lambda q, k, v, *bias: pf.flash_attention(
      q, k, v, bias=bias[0] if bias else None, is_causal=causal,
      implementation=impl, **kw))
  cudnn = lambda q, k, v, *bias: jax.nn.dot_product_attention(
      q, k, v, bias=bias[0] if bias else None, is_causal=causal,
      implementation="cudnn")
  return {  # name: (fn, takes the bias)
      "triton": (ours("triton"), False),
      "cudnn": (cudnn, False),
      "triton bias": (ours("triton"), True),
      "cudnn bias": (cudnn, True),
      "triton alibi": (ours("triton", alibi_slopes=slopes), False),
      "triton dropout": (ours("triton", dropout_rate=RATE, dropout_rng=rng), False),
      "mosaic": (ours("mosaic"), False),
      "mosaic dropout": (ours("mosaic", dropout_rate=RATE, dropout_rng=rng), False),
      "mosaic alibi": (ours("mosaic", alibi_slopes=slopes), False),
      "mosaic bias": (ours("mosaic"), True),
  }


def torch_times(b, t, causal, reps):
  """{name: (fwd s, fwd+bwd s)} of torch SDPA's flash kernel, or {} (reason logged)."""
  try:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    assert torch.cuda.is_available(), "no CUDA in torch"
  except Exception as e:  # optional peer
    log(f"  torch: not available: {type(e).__name__}: {e}")
    return {}
  out = {}
  gen = torch.Generator(device="cuda").manual_seed(0)
  q, k, v = (torch.randn(b, N, t, H, device="cuda", dtype=torch.bfloat16,
                         generator=gen, requires_grad=True) for _ in range(3))
  do = torch.randn(b, N, t, H, device="cuda", dtype=torch.bfloat16, generator=gen)
  F = torch.nn.functional
  for name, p in (("torch flash", 0.0), ("torch flash dropout", RATE)):
    try:
      with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        fwd = lambda: F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=causal)
        def fb():
          o = fwd()
          o.backward(do)
        times = []
        for f in (fwd, fb):
          for _ in range(3):
            f()
          torch.cuda.synchronize()
          single = time.perf_counter()
          f()
          torch.cuda.synchronize()
          single = time.perf_counter() - single
          n = max(1, int(0.05 / max(single, 1e-6)))
          samples = []
          for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(n):
              f()
            end.record()
            torch.cuda.synchronize()
            samples.append(start.elapsed_time(end) / 1e3 / n)
          times.append(float(np.median(samples)))
        out[name] = tuple(times)
    except Exception as e:
      log(f"  {name}: failed: {type(e).__name__}: {str(e)[:300]}")
  del q, k, v, do
  torch.cuda.empty_cache()
  return out


def bench_cell(t, causal, reps, sample_ms, with_torch, impls=None):
  b = TOKENS // t
  ks = jax.random.split(jax.random.key(t), 5)
  q, k, v = (jax.random.normal(kk, (b, t, N, H), jnp.bfloat16) for kk in ks[:3])
  bias = jax.random.normal(ks[3], (1, N, t, t), jnp.bfloat16)
  do = jax.random.normal(ks[4], q.shape, jnp.bfloat16)
  flops = 4 * b * N * t * t * H * (0.5 if causal else 1.0)
  calls, grads = {}, {}
  for name, (f, with_bias) in jax_impls(causal, t).items():
    if impls is not None and name not in impls:
      continue
    args = (q, k, v, bias) if with_bias else (q, k, v)
    try:
      fb = fwd_bwd(f, len(args))
      grads[name] = jax.block_until_ready(fb(*args, do))
      calls[name] = (jax.jit(f), args)
      calls[name + " fb"] = (fb, (*args, do))
    except Exception as e:  # e.g. a peer without this feature
      log(f"  {name}: failed: {type(e).__name__}: {str(e)[:300]}")
  errs = {}
  if "triton bias" in grads and "cudnn bias" in grads:
    errs = {f"rel_l2_{n}": rel_l2(a, r) for n, a, r in
            zip(("dq", "dk", "dv", "dbias"), grads["triton bias"], grads["cudnn bias"])}
    out = rel_l2(calls["triton bias"][0](q, k, v, bias), calls["cudnn bias"][0](q, k, v, bias))
    errs["rel_l2_out"] = out
    log("  ours vs cudnn (bias): " + ", ".join(f"{k} {v:.1e}" for k, v in errs.items()))
  if "mosaic bias" in grads and "cudnn bias" in grads:
    mb = {f"rel_l2_mosaic_{n}": rel_l2(a, r) for n, a, r in
          zip(("dq", "dk", "dv", "dbias"), grads["mosaic bias"],
              grads["cudnn bias"])}
    mb["rel_l2_mosaic_out"] = rel_l2(calls["mosaic bias"][0](q, k, v, bias),
                                     calls["cudnn bias"][0](q, k, v, bias))
    log("  mosaic vs cudnn (bias): "
        + ", ".join(f"{k} {v:.1e}" for k, v in mb.items()))
    errs.update(mb)
  if "mosaic dropout" in grads and "triton dropout" in grads:
    drop = {f"rel_l2_dropout_{n}": rel_l2(a, r) for n, a, r in
            zip("qkv", grads["mosaic dropout"], grads["triton dropout"])}
    log("  mosaic vs triton (dropout grads): "
        + ", ".join(f"{k} {v:.1e}" for k, v in drop.items()))
    errs.update(drop)
  del grads
  samples, _ = interleaved_samples(calls, reps, sample_ms / 1e3)
  rows = []
  for name in [n for n in calls if not n.endswith(" fb")]:
    (fwd_s, fwd_spread), (fb_s, fb_spread) = (summarise(samples[name]),
                                              summarise(samples[name + " fb"]))
    rows.append(dict(name=name, fwd_s=fwd_s, fb_s=fb_s,
                     spread=max(fwd_spread, fb_spread),
                     fb_samples=samples[name + " fb"]))
  del calls
  if with_torch:
    for name, (fwd_s, fb_s) in torch_times(b, t, causal, reps).items():
      rows.append(dict(name=name, fwd_s=fwd_s, fb_s=fb_s, spread=float("nan")))
  for r in rows:
    r.update(cell=cell_name(t, causal), b=b, n=N, h=H, t=t,
             fwd_tflops=flops / r["fwd_s"] / 1e12,
             fwdbwd_tflops=3.5 * flops / r["fb_s"] / 1e12, **errs)
    log(f"  {r['name']:20s} fwd {r['fwd_s'] * 1e3:8.2f} ms {r['fwd_tflops']:6.1f} TF/s"
        f"   fwd+bwd {r['fb_s'] * 1e3:8.2f} ms {r['fwdbwd_tflops']:6.1f} TF/s"
        f"   spread {r['spread']:.2f}")
  return rows


RATIOS = [  # (label, numerator impl, denominator impl): fwd+bwd time ratio
    ("bias: cudnn / triton (>1: ours faster)", "cudnn bias", "triton bias"),
    ("bias: cudnn / mosaic (goal >= 1.5)", "cudnn bias", "mosaic bias"),
    ("bias: mosaic no-bias / bias (goal >= 0.8)", "mosaic", "mosaic bias"),
    ("alibi: triton no-bias / alibi", "triton", "triton alibi"),
    ("dropout: triton no-drop / dropout", "triton", "triton dropout"),
    ("dropout: torch flash dropout / triton dropout", "torch flash dropout", "triton dropout"),
    ("alibi: mosaic no-bias / alibi", "mosaic", "mosaic alibi"),
    ("dropout: mosaic no-drop / dropout", "mosaic", "mosaic dropout"),
    ("dropout: torch flash dropout / mosaic dropout", "torch flash dropout", "mosaic dropout"),
    ("no bias: cudnn / triton", "cudnn", "triton"),
]


def table(rows):
  cells = list(dict.fromkeys(r["cell"] for r in rows))
  by = {(r["cell"], r["name"]): r for r in rows}
  names = list(dict.fromkeys(r["name"] for r in rows))
  lines = ["fwd+bwd TFLOP/s (fwd TFLOP/s)",
           f"{'impl':22s}" + "".join(f"{c:>18s}" for c in cells)]
  for n in names:
    lines.append(f"{n:22s}" + "".join(
        f"{by[c, n]['fwdbwd_tflops']:8.1f} ({by[c, n]['fwd_tflops']:6.1f})" if (c, n) in by
        else f"{'-':>18s}" for c in cells))
  lines += ["", "fwd+bwd time ratios",
            f"{'ratio':46s}" + "".join(f"{c:>10s}" for c in cells)]
  for label, a, b in RATIOS:
    lines.append(f"{label:46s}" + "".join(
        f"{by[c, a]['fb_s'] / by[c, b]['fb_s']:10.2f}" if (c, a) in by and (c, b) in by
        else f"{'-':>10s}" for c in cells))
  # Per rep, the two bursts of one pass (``timing.paired_ratio``); torch's
  # rows are timed in their own loop, so they have no pairs.
  paired = lambda c, a, b: all(
      (c, x) in by and "fb_samples" in by[c, x] for x in (a, b))
  lines += ["", "fwd+bwd per-rep time ratios: median [q25, q75]",
            f"{'ratio':46s}" + "".join(f"{c:>22s}" for c in cells)]
  quartiles = lambda c, a, b: "{1:.3f} [{0:.3f}, {2:.3f}]".format(
      *paired_ratio(by[c, a]["fb_samples"], by[c, b]["fb_samples"]))
  for label, a, b in RATIOS:
    lines.append(f"{label:46s}" + "".join(
        f"{quartiles(c, a, b) if paired(c, a, b) else '-':>22s}" for c in cells))
  return "\n".join(lines)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--cells", default=",".join(cell_name(*c) for c in CELLS))
  ap.add_argument("--reps", type=int, default=21)
  ap.add_argument("--sample-ms", type=float, default=30.0)
  ap.add_argument("--no-torch", action="store_true")
  ap.add_argument("--impls", default=None,
                  help="comma-separated rows to run (default: all)")
  ap.add_argument("--out", default=None)
  args = ap.parse_args()
  wanted = args.cells.split(",")
  impls = (None if args.impls is None else
           {name.replace("-", " ") for name in args.impls.split(",")})
  with_torch = not args.no_torch and (impls is None or "torch" in impls)
  dev = jax.devices()[0]
  env = dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(),
             device=dev.device_kind, jax=jax.__version__)
  log(json.dumps(env))
  rows = []
  for t, causal in CELLS:
    if cell_name(t, causal) not in wanted:
      continue
    log(f"cell {cell_name(t, causal)}")
    rows += bench_cell(t, causal, args.reps, args.sample_ms, with_torch, impls)
    text = table(rows)
    if args.out:  # after every cell: a run cut short keeps what it measured
      os.makedirs(args.out, exist_ok=True)
      with open(os.path.join(args.out, "bias_bench.json"), "w") as f:
        json.dump(dict(env=env, rows=rows), f, indent=1)
      with open(os.path.join(args.out, "bias_bench_table.txt"), "w") as f:
        f.write(json.dumps(env) + "\n" + text + "\n")
  log(table(rows))


if __name__ == "__main__":
  main()
