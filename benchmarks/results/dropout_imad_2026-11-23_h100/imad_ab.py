"""Dropout hash A/B in one process (branch h8-imad-hash): no dropout, main's
keep bit ``(r ^ c) * m >= t`` and the branch's ``c * m + r >= t`` (one
IMAD), Mosaic kernels, default configs, dropout 0.1.  The 'xor' row is
timing only (its bits are not the branch's definition).  A new function per
variant (jit's trace cache)."""
import sys, jax, jax.numpy as jnp
from pallas_flash import dropout
import pallas_flash as pf
from benchmarks.mosaic_bench import cell_inputs
from benchmarks.timing import time_interleaved

IMAD = dropout.keep
XOR = lambda rk, c, t: (rk[0] ^ c) * rk[1] >= t
VARIANTS = [("none", None), ("xor (main)", XOR), ("imad", IMAD)]
for cell in sys.argv[1].split(","):
  h, t, c = cell.split("-"); h = int(h[1:]); t = int(t[:-1]) * 1024; causal = c == "C"
  b, n, (q, k, v), flops = cell_inputs(h, t, causal)
  do = jax.random.normal(jax.random.key(99), q.shape, jnp.bfloat16)
  calls = {}
  for name, keep in VARIANTS:
    dropout.keep = keep or IMAD
    kw = dict(dropout_rate=0.1, dropout_rng=jax.random.key(7)) if keep else {}
    f = lambda q, k, v, kw=kw: pf.flash_attention(q, k, v, is_causal=causal, implementation="mosaic", **kw)
    def g(q, k, v, do, f=f):
      o, vjp = jax.vjp(f, q, k, v); return vjp(do)
    try:
      calls[name] = (jax.jit(f).lower(q, k, v).compile(), (q, k, v))
      calls[name + " fb"] = (jax.jit(g).lower(q, k, v, do).compile(), (q, k, v, do))
    except Exception as e:
      print(cell, name, "failed", type(e).__name__, str(e)[:300])
  dropout.keep = IMAD
  tm = time_interleaved(calls, 5, 0.03)
  base = None
  print(f"{cell}: fwd / fwd+bwd / bwd TFLOP/s, and / none", flush=True)
  for name, _ in VARIANTS:
    if name not in calls: continue
    fs, fbs = tm[name][0], tm[name + " fb"][0]
    r = (flops / fs / 1e12, 3.5 * flops / fbs / 1e12, 2.5 * flops / (fbs - fs) / 1e12)
    base = base or r
    print(f"  {name:11s} {r[0]:6.1f} {r[1]:6.1f} {r[2]:6.1f}   {r[0]/base[0]:.2f} {r[1]/base[1]:.2f} {r[2]/base[2]:.2f}")
