"""Backward config A/B in one process: for each cell, the default backward
config and each variant (``field=value,...``, MosaicBackwardConfig fields),
each compiled twice as separate executables and timed interleaved
(``benchmarks.timing.time_interleaved``), so that the two readings of one
config show the spread; dQ, dK, dV of each variant are compared bitwise with
the default's.

  python3 cfg_ab.py d256-4k-N,d256-4k-C persistent=True [more variants]
"""
import dataclasses
import sys

import jax
import jax.numpy as jnp

import pallas_flash as pf
from benchmarks.mosaic_bench import cell_inputs, mosaic_kernels, parse_variant
from benchmarks.timing import time_interleaved
from pallas_flash.mosaic.config import MosaicBackwardConfig, MosaicConfig

cells, variants = sys.argv[1].split(","), sys.argv[2:]
for cell in cells:
  h, t, c = cell.split("-")
  h, t, causal = int(h[1:]), int(t[:-1]) * 1024, c == "C"
  b, n, (q, k, v), flops = cell_inputs(h, t, causal)
  do = jax.random.normal(jax.random.key(99), q.shape, jnp.bfloat16)
  fwd_cfg = MosaicConfig.default(h, causal, kv_seqlen=t)
  bwd_default = MosaicBackwardConfig.default(h, causal)
  configs = {"default": bwd_default}
  for text in variants:
    configs[text] = dataclasses.replace(bwd_default, **parse_variant(text))

  def grads_fn(bwd):
    f = lambda q, k, v: pf.flash_attention(
        q, k, v, is_causal=causal, implementation="mosaic",
        config=dataclasses.replace(fwd_cfg, backward=bwd))
    def g(q, k, v, do):
      _, vjp = jax.vjp(f, q, k, v)
      return vjp(do)
    return f, g

  calls, grads, kernels = {}, {}, {}
  f, _ = grads_fn(bwd_default)
  calls["fwd"] = (jax.jit(f).lower(q, k, v).compile(), (q, k, v))
  for name, bwd in configs.items():
    for rep in "ab":  # two executables of one config: the spread
      _, g = grads_fn(bwd)
      try:
        cg = jax.jit(g).lower(q, k, v, do).compile()
      except Exception as e:
        print(f"  {name}: failed: {type(e).__name__}: {str(e)[:300]}")
        break
      calls[f"{name} {rep}"] = (cg, (q, k, v, do))
      kernels[name] = mosaic_kernels(cg)
      grads[name] = cg(q, k, v, do)
  same = {name: all(bool(jnp.array_equal(x, y)) for x, y in
                    zip(grads[name], grads["default"])) for name in grads}
  tm = time_interleaved(calls, 9, 0.03)
  fwd_s = tm["fwd"][0]
  print(f"{cell}: backward TFLOP/s (spread), ratio to the default's mean; "
        f"forward {flops / fwd_s / 1e12:.1f}")
  base = None
  for name in grads:
    rs = [2.5 * flops / (tm[f"{name} {r}"][0] - fwd_s) / 1e12 for r in "ab"]
    base = base or sum(rs) / 2
    print(f"  {name:28s} {rs[0]:6.1f} {rs[1]:6.1f}  "
          f"{rs[0] / base:.3f} {rs[1] / base:.3f}  bitwise={same[name]} "
          f"mosaic_kernels={kernels[name]}",
          flush=True)
