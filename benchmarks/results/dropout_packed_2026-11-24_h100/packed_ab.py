"""Run 73: the dropout keep bits of a register pair from one multiply-add
and one f16x2 compare (``forward.PACKED_KEEP``: PTX ``set.geu.u32.f16x2`` +
AND on the packed bf16 P in the forward, ``setp.geu.f16x2`` + two selects on
dP in the dQ kernel, two multiply-adds + PRMT + ``setp`` + four selects in the
key-major dK/dV kernel) against main's multiply-add, compare and select per
entry.  Timing only: the packed form's bits are not the mask's definition.
The switch lived in branch commit 3c16be1 (h-packed-keep), not in main.
d128, dropout 0.1, forward and fwd+bwd, no dropout's default as the base.
One process per call, interleaved bursts."""
import sys, jax, jax.numpy as jnp
import pallas_flash as pf
from pallas_flash.mosaic import forward as fwd
from benchmarks.mosaic_bench import cell_inputs
from benchmarks.timing import time_interleaved

NAMES = ("no dropout", "dropout main", "dropout packed")
for cell in sys.argv[1].split(","):
  h, t, c = cell.split("-"); h = int(h[1:]); t = int(t[:-1]) * 1024; causal = c == "C"
  b, n, (q, k, v), flops = cell_inputs(h, t, causal)
  ct = jax.random.normal(jax.random.key(3), q.shape, q.dtype)
  calls = {}
  for name, rate, packed in zip(NAMES, (0.0, 0.1, 0.1), (False, False, True)):
    fwd.PACKED_KEEP = packed
    kw = dict(dropout_rate=rate, dropout_rng=jax.random.key(7)) if rate else {}
    f = lambda q, k, v, kw=kw: pf.flash_attention(q, k, v, is_causal=causal,
                                                  implementation="mosaic", **kw)
    g = jax.grad(lambda q, k, v, f=f: jnp.vdot(f(q, k, v).astype(jnp.float32),
                                               ct.astype(jnp.float32)), argnums=(0, 1, 2))
    try:
      print(f"==== compile {cell} {name}", flush=True)
      cf = jax.jit(f).lower(q, k, v).compile()
      cg = jax.jit(g).lower(q, k, v).compile()
      out = cf(q, k, v)
      print(f"{cell} {name}: forward finite {bool(jnp.isfinite(out).all())}, "
            f"zeros fraction {float(jnp.mean(out == 0)):.3f}", flush=True)
    except Exception as e:
      print(cell, name, "failed", type(e).__name__, str(e)[:600], flush=True)
      continue
    calls[name + " fwd"] = (cf, (q, k, v))
    calls[name + " fwd+bwd"] = (cg, (q, k, v))
  fwd.PACKED_KEEP = False
  tm = time_interleaved(calls, 7, 0.03)
  print(f"{cell}: TFLOP/s (spread), ratio to no dropout", flush=True)
  for kind, mult in (("fwd", 1.0), ("fwd+bwd", 3.5)):
    base = tm.get("no dropout " + kind, (float("nan"),))[0]
    for name in NAMES:
      key = f"{name} {kind}"
      if key in tm:
        print(f"  {key:24s} {mult * flops / tm[key][0] / 1e12:6.1f} ({tm[key][1]:.2f})"
              f"  {base / tm[key][0]:.3f}", flush=True)
