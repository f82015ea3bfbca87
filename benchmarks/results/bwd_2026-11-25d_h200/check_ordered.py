"""The ordered f32 dQ adds (MosaicBackwardConfig.ordered_adds) natively:
gradients against the f32 XLA reference (random cotangent) and identical bits
over repeated runs, at sizes with one and several heads per round.

  python3 check_ordered.py  (prints one line per case; exits 1 on a failure)
"""
import dataclasses
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

import pallas_flash as pf
from pallas_flash.mosaic.config import MosaicBackwardConfig, MosaicConfig

ORDERED = dict(fused=True, ordered_adds=True, prefetch_rows=False,
               row_ring=True)
if os.environ.get("PF_PROBE"):  # (branch h-ordered-adds: a probe's bits)
  ORDERED["ordered_probe"] = os.environ["PF_PROBE"]
bad = 0
for b, t, n, kh, h in ((2, 1024, 4, 2, 128), (1, 2048, 2, 2, 64),
                       (4, 4096, 16, 16, 128), (1, 16384, 2, 2, 128)):
  keys = jax.random.split(jax.random.key(t + n), 4)
  q = jax.random.normal(keys[0], (b, t, n, h), jnp.bfloat16)
  k, v = (jax.random.normal(x, (b, t, kh, h), jnp.bfloat16) for x in keys[1:3])
  do = jax.random.normal(keys[3], q.shape, jnp.bfloat16)
  cfg = dataclasses.replace(MosaicConfig.default(h, False, kv_seqlen=t),
                            backward=dataclasses.replace(
                                MosaicBackwardConfig.default(h, False),
                                **ORDERED))

  def grads(impl, config=None):
    f = lambda q, k, v: pf.flash_attention(q, k, v, implementation=impl,
                                           config=config)
    return jax.jit(lambda q, k, v, do: jax.vjp(f, q, k, v)[1](do))

  g = grads("mosaic", cfg)
  runs = [g(q, k, v, do) for _ in range(5)]
  same = all(bool(jnp.array_equal(x, y)) for r in runs[1:]
             for x, y in zip(r, runs[0]))
  f32 = lambda x: x.astype(jnp.float32)
  ref = grads("xla")(f32(q), f32(k), f32(v), f32(do))
  errs = [float(jnp.max(jnp.abs(f32(x) - y)) / jnp.max(jnp.abs(y)))
          for x, y in zip(runs[0], ref)]
  ok = same and max(errs) < 2e-2
  bad += not ok
  print(f"B{b} T=S={t} N{n}/{kh} d{h}: bitwise over 5 runs {same}, "
        f"max err / max |ref| dq {errs[0]:.2e} dk {errs[1]:.2e} "
        f"dv {errs[2]:.2e} {'ok' if ok else 'FAIL'}", flush=True)
sys.exit(1 if bad else 0)
