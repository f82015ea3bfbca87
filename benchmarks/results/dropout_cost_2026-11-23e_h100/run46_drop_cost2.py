"""Dropout A/B in one process (needs branch h6-early-keys): keep-bit variants
x where the per-step key vectors come from: global loads at the step's start
(EARLY_KEYS) or after the score GEMMs, or the TMA rings (RING_ROW_KEYS: the
dK/dV kernel's row keys with Q / dO; RING_COL_KEYS: the forward's and the dQ
kernel's column keys with V / K).  Timing only outside 'base'."""
import sys, os, jax, jax.numpy as jnp
from pallas_flash import dropout
from pallas_flash.mosaic import forward as fwd
from pallas_flash.mosaic import backward as bwd
import pallas_flash as pf
from benchmarks.mosaic_bench import cell_inputs
from benchmarks.timing import time_interleaved

ORIG = dropout.keep
KEEPS = {"base": ORIG, "cmp": lambda rk, c, t: (c + 0 * rk[0]) >= t,
         # one row key: m_i = r_i | 1 (no second row vector)
         "onekey": lambda rk, c, t: (rk[0] ^ c) * (rk[0] | 1) >= t,
         # folds to True: no bits (run 43: 1.09 / 1.12 of none at d128 S4k C)
         "all": lambda rk, c, t: (c + 0 * rk[0]) == (c + 0 * rk[0])}
# (name, keep variant, EARLY_KEYS, RING_ROW_KEYS, RING_COL_KEYS)
VARIANTS = [("none", None, True, False, False),
            ("late", "base", False, False, False),
            ("early", "base", True, False, False),
            ("ring", "base", True, True, True),
            ("cmp-late", "cmp", False, False, False),
            ("cmp-ring", "cmp", True, True, True),
            ("onekey-late", "onekey", False, False, False),
            ("onekey-ring", "onekey", True, True, True),
            ("all", "all", False, False, False)]
cells = sys.argv[1].split(",")
for cell in cells:
  h, t, c = cell.split("-"); h = int(h[1:]); t = int(t[:-1]) * 1024; causal = c == "C"
  b, n, (q, k, v), flops = cell_inputs(h, t, causal)
  do = jax.random.normal(jax.random.key(99), q.shape, jnp.bfloat16)
  calls = {}
  for name, keep, early, rrows, rcols in VARIANTS:
    dropout.keep = KEEPS.get(keep, ORIG)
    fwd.EARLY_KEYS, bwd.RING_ROW_KEYS, fwd.RING_COL_KEYS = early, rrows, rcols
    kw = dict(dropout_rate=0.1, dropout_rng=jax.random.key(7)) if keep else {}
    f = lambda q, k, v, kw=kw: pf.flash_attention(q, k, v, is_causal=causal, implementation="mosaic", **kw)
    def g(q, k, v, do, f=f):
      o, vjp = jax.vjp(f, q, k, v); return vjp(do)
    print(f"## {cell} {name}", flush=True)
    try:
      cf = jax.jit(f).lower(q, k, v).compile()
      cg = jax.jit(g).lower(q, k, v, do).compile()
      calls[name] = (cf, (q, k, v)); calls[name + " fb"] = (cg, (q, k, v, do))
    except Exception as e:
      print(name, "failed", type(e).__name__, str(e)[:300])
  dropout.keep = ORIG
  fwd.EARLY_KEYS, bwd.RING_ROW_KEYS, fwd.RING_COL_KEYS = True, False, False
  tm = time_interleaved(calls, 5, 0.03)
  base = None
  print(f"{cell}: fwd / fwd+bwd / bwd TFLOP/s, and / none")
  for name, *_ in VARIANTS:
    if name not in calls: continue
    fs, fbs = tm[name][0], tm[name + " fb"][0]
    r = (flops / fs / 1e12, 3.5 * flops / fbs / 1e12, 2.5 * flops / (fbs - fs) / 1e12)
    base = base or r
    print(f"  {name:9s} {r[0]:6.1f} {r[1]:6.1f} {r[2]:6.1f}   {r[0]/base[0]:.2f} {r[1]/base[1]:.2f} {r[2]/base[2]:.2f}")
