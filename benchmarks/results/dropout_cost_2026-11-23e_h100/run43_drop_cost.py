"""Where dropout's time goes (timing only; the variants' bits are wrong).

Each variant replaces pallas_flash.dropout.keep while its functions are traced
and compiled; all are then timed interleaved in one process.
  base: (r ^ c) * m >= t   (xor, imul, compare; + select(s))
  imad: c * m + r >= t     (one IMAD, compare; + select(s))
  cmp:  c >= t             (compare only; + select(s))
  all:  c == c             (folded to True: no bits, no selects)
"""
import sys, jax, jax.numpy as jnp
from pallas_flash import dropout
import pallas_flash as pf
from benchmarks.mosaic_bench import cell_inputs
from benchmarks.timing import time_interleaved

ORIG = dropout.keep
VARIANTS = {
  "base": ORIG,
  "imad": lambda rk, c, t: c * rk[1] + rk[0] >= t,
  "cmp": lambda rk, c, t: (c + 0 * rk[0]) >= t,
  "all": lambda rk, c, t: (c + 0 * rk[0]) == (c + 0 * rk[0]),
}
cells = sys.argv[1].split(",")
for cell in cells:
  h, t, c = cell.split("-"); h = int(h[1:]); t = int(t[:-1]) * 1024; causal = c == "C"
  b, n, (q, k, v), flops = cell_inputs(h, t, causal)
  do = jax.random.normal(jax.random.key(99), q.shape, jnp.bfloat16)
  calls = {}
  def mk(rate):
    kw = dict(dropout_rate=rate, dropout_rng=jax.random.key(7)) if rate else {}
    f = lambda q, k, v: pf.flash_attention(q, k, v, is_causal=causal, implementation="mosaic", **kw)
    def g(q, k, v, do):
      o, vjp = jax.vjp(f, q, k, v); return vjp(do)
    return f, g
  for name in ["none", *VARIANTS]:
    dropout.keep = VARIANTS.get(name, ORIG)
    f, g = mk(0.1 if name != "none" else 0.0)
    try:
      cf = jax.jit(f).lower(q, k, v).compile()
      cg = jax.jit(g).lower(q, k, v, do).compile()
      calls[name] = (cf, (q, k, v)); calls[name + " fb"] = (cg, (q, k, v, do))
    except Exception as e:
      print(name, "failed", type(e).__name__, str(e)[:300])
  dropout.keep = ORIG
  tm = time_interleaved(calls, 5, 0.03)
  base = None
  print(f"{cell}: fwd / fwd+bwd / bwd TFLOP/s, and / none")
  for name in ["none", *VARIANTS]:
    if name not in calls: continue
    fs, fbs = tm[name][0], tm[name + " fb"][0]
    r = (flops / fs / 1e12, 3.5 * flops / fbs / 1e12, 2.5 * flops / (fbs - fs) / 1e12)
    base = base or r
    print(f"  {name:5s} {r[0]:6.1f} {r[1]:6.1f} {r[2]:6.1f}   {r[0]/base[0]:.2f} {r[1]/base[1]:.2f} {r[2]/base[2]:.2f}")
