"""Does the backward lose its last wave? Ours (default) and cuDNN, d128
non-causal, 16 heads, at sequence lengths whose CTA count (each of our two
kernels: heads x T / 128 x B) is just over, at, and just under a multiple of
the 132 SMs.  If our CTAs ran in lockstep waves, our rate would move with
work / (waves x steps) and cuDNN's would not: the ratio column tells.

  python3 waves.py B:T [B:T ...]
"""
import math
import sys

import jax
import jax.numpy as jnp

import pallas_flash as pf
from benchmarks.timing import time_interleaved

H, D, SMS = 16, 128, 132
print(jax.devices()[0].device_kind, "jax", jax.__version__)
impls = {
    "ours": lambda q, k, v: pf.flash_attention(q, k, v, implementation="mosaic"),
    "cudnn": lambda q, k, v: jax.nn.dot_product_attention(
        q, k, v, implementation="cudnn"),
}


def fwd_bwd(f):
  def g(q, k, v, do):
    _, vjp = jax.vjp(f, q, k, v)
    return vjp(do)
  return jax.jit(g)


rows = []
for spec in sys.argv[1:]:
  b, t = map(int, spec.split(":"))
  ks = jax.random.split(jax.random.key(0), 4)
  q, k, v, do = (jax.random.normal(x, (b, t, H, D), jnp.bfloat16) for x in ks)
  calls = {}
  for name, f in impls.items():
    calls[name] = (jax.jit(f).lower(q, k, v).compile(), (q, k, v))
    calls[name + " fb"] = (fwd_bwd(f).lower(q, k, v, do).compile(), (q, k, v, do))
  tm = time_interleaved(calls, 9, 0.03)
  flops = 4.0 * b * t * t * H * D
  bwd = {n: 2.5 * flops / (tm[n + " fb"][0] - tm[n][0]) / 1e12 for n in impls}
  ctas = H * math.ceil(t / 128) * b
  waves = math.ceil(ctas / SMS)
  rows.append((b, t, ctas, ctas / SMS, (ctas / SMS) / waves, bwd["ours"],
               bwd["cudnn"], bwd["ours"] / bwd["cudnn"]))
  print(rows[-1], flush=True)

print("\n| B | T | CTAs a kernel | waves | wave fill | ours bwd | cuDNN bwd | ours / cuDNN |")
print("|---|---|---|---|---|---|---|---|")
for b, t, c, w, fill, o, cd, r in rows:
  print(f"| {b} | {t} | {c} | {w:.2f} | {fill:.3f} | {o:.0f} | {cd:.0f} | {r:.3f} |")
