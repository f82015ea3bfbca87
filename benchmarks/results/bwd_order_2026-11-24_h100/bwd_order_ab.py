"""Run 111 (issue 12): the causal backward's launch order.  Today each kernel
launches a head's tiles together, longest first within the head (dK/dV:
``order=(heads, kv_tiles, batch)``; dQ: ``(heads, q_tiles, batch)``, its q
tiles reversed).  "lpt": the tile axis slowest, so that every head's longest
tiles launch first and the grid ends on the shortest ones (longest
processing time first over the whole grid), at the cost of the L2 reuse of a
head's Q / dO (dK/dV) or K / V (dQ) between its tiles.  Forward and fwd+bwd
of ours (default, lpt) and cuDNN in one process, interleaved; backward =
fwd+bwd - fwd.  bf16, B x T = 16384.

  python3 bwd_order_ab.py [CELL ...]   (cells as d64-4k-C)
"""
import os, sys
import jax, jax.numpy as jnp
import pallas_flash as pf
from pallas_flash.mosaic import backward
from benchmarks.mosaic_bench import cell_inputs
from benchmarks.timing import time_interleaved

_launch = backward._launch


def lpt_launch(kernel, name, operands, out_type, order, *a, **k):
  return _launch(kernel, name, operands, out_type,
                 (order[1], order[0], order[2]), *a, **k)


cells = sys.argv[1:] or ["d64-4k-C", "d128-4k-C", "d64-16k-C", "d128-16k-C"]
calls, flops = {}, {}
for cell in cells:
  h, t = int(cell.split("-")[0][1:]), int(cell.split("-")[1][:-1]) * 1024
  b, n, (q, k, v), f_flops = cell_inputs(h, t, True)
  ct = jax.random.normal(jax.random.key(1), q.shape, jnp.float32)
  impls = {
      "ours": (lambda q, k, v: pf.flash_attention(
          q, k, v, is_causal=True, implementation="mosaic"), _launch),
      "ours lpt": (lambda q, k, v: pf.flash_attention(
          q, k, v, is_causal=True, implementation="mosaic"), lpt_launch),
      "cudnn": (lambda q, k, v: jax.nn.dot_product_attention(
          q, k, v, is_causal=True, implementation="cudnn"), _launch)}
  for name, (fwd, launch) in impls.items():
    loss = lambda q, k, v, fwd=fwd: (fwd(q, k, v).astype(jnp.float32) * ct).sum()
    backward._launch = launch
    try:
      for mode, f in (("fwd", fwd), ("fwd+bwd", jax.grad(loss, (0, 1, 2)))):
        calls[(cell, name, mode)] = (jax.jit(f).lower(q, k, v).compile(),
                                     (q, k, v))
    finally:
      backward._launch = _launch
  flops[cell] = f_flops
  print("compiled", cell, flush=True)
tm = time_interleaved(calls, int(os.environ.get("REPS", 11)), 0.04)
print("causal backward TFLOP/s (2.5 x forward FLOPs / (fwd+bwd - fwd)); "
      "fwd+bwd in brackets")
print(f"{'cell':11s} {'ours':>14s} {'ours lpt':>14s} {'cudnn':>14s} {'lpt/ours':>8s} {'ours/cudnn':>10s} {'lpt/cudnn':>9s}")
for cell in cells:
  bw, fb = {}, {}
  for name in ("ours", "ours lpt", "cudnn"):
    tf_, tb = tm[(cell, name, "fwd")][0], tm[(cell, name, "fwd+bwd")][0]
    bw[name] = 2.5 * flops[cell] / (tb - tf_) / 1e12
    fb[name] = 3.5 * flops[cell] / tb / 1e12
  print(f"{cell:11s} " + " ".join(f"{bw[nm]:6.1f} ({fb[nm]:5.1f})" for nm in bw)
        + f" {bw['ours lpt'] / bw['ours']:8.3f} {bw['ours'] / bw['cudnn']:10.3f} {bw['ours lpt'] / bw['cudnn']:9.3f}", flush=True)
