"""What the element-wise mask of the masked (diagonal / edge) steps costs
(timing only; the variants' masks are wrong outside 'base' and 'causal').

Each variant replaces pallas_flash.masks.position_visible while its functions
are traced and compiled (forward and both backward kernels); all are timed
interleaved in one process.
  base:   (q < q_len) & (k < kv_len) & (k <= q + offset)   (main)
  causal: k <= q + offset          (right here: the cells have full lengths)
  none:   all True                 (no mask work: the bound of a cheaper mask)
"""
import sys, jax, jax.numpy as jnp
from pallas_flash import masks
import pallas_flash as pf
from benchmarks.mosaic_bench import cell_inputs
from benchmarks.timing import time_interleaved

ORIG = masks.position_visible
VARIANTS = {
  "base": ORIG,
  "causal": lambda spec, q, k, ql, kl, off: k <= q + off,
  "none": lambda spec, q, k, ql, kl, off: (k + 0 * q) == (k + 0 * q),
}
for cell in sys.argv[1].split(","):
  h, t, c = cell.split("-"); h = int(h[1:]); t = int(t[:-1]) * 1024
  causal = c == "C"
  b, n, (q, k, v), flops = cell_inputs(h, t, causal)
  do = jax.random.normal(jax.random.key(99), q.shape, jnp.bfloat16)
  def mk():  # fresh functions per variant: jit's caches must not share
    f = lambda q, k, v: pf.flash_attention(q, k, v, is_causal=causal,
                                           implementation="mosaic")
    def g(q, k, v, do):
      _, vjp = jax.vjp(f, q, k, v)
      return vjp(do)
    return f, g
  calls, grads = {}, {}
  for name, fn in VARIANTS.items():
    masks.position_visible = fn
    f, g = mk()
    cf = jax.jit(f).lower(q, k, v).compile()
    cg = jax.jit(g).lower(q, k, v, do).compile()
    calls[name] = (cf, (q, k, v)); calls[name + " fb"] = (cg, (q, k, v, do))
    grads[name] = cg(q, k, v, do)
  masks.position_visible = ORIG
  same = all(bool(jnp.array_equal(a, b_)) for a, b_ in
             zip(grads["base"], grads["causal"]))
  tm = time_interleaved(calls, 7, 0.03)
  print(f"{cell}: fwd / fwd+bwd / bwd TFLOP/s, and / base "
        f"(causal's gradients bitwise equal to base's: {same})")
  base = None
  for name in VARIANTS:
    fs, fbs = tm[name][0], tm[name + " fb"][0]
    r = (flops / fs / 1e12, 3.5 * flops / fbs / 1e12,
         2.5 * flops / (fbs - fs) / 1e12)
    base = base or r
    print(f"  {name:6s} {r[0]:6.1f} {r[1]:6.1f} {r[2]:6.1f}   "
          f"{r[0]/base[0]:.3f} {r[1]/base[1]:.3f} {r[2]/base[2]:.3f}",
          flush=True)
