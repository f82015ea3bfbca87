"""Run 102: the d128 gradients with and without stagger_consumers, compared bit for bit (GPU)."""
import dataclasses

import jax
import jax.numpy as jnp

import pallas_flash as pf
from pallas_flash.mosaic.config import MosaicBackwardConfig, MosaicConfig

for causal in (False, True):
  for dropout in (0.0, 0.1):
    b, t, n, k, h = 2, 2000, 8, 2, 128
    keys = jax.random.split(jax.random.key(0), 4)
    q = jax.random.normal(keys[0], (b, t, n, h), jnp.bfloat16)
    kk = jax.random.normal(keys[1], (b, t, k, h), jnp.bfloat16)
    v = jax.random.normal(keys[2], (b, t, k, h), jnp.bfloat16)
    do = jax.random.normal(keys[3], (b, t, n, h), jnp.bfloat16)
    base = MosaicBackwardConfig.default(h, causal, dropout > 0)
    grads = []
    for stagger in (False, True):
      cfg = MosaicConfig.default(h, causal, kv_seqlen=t, dropout=dropout > 0)
      cfg = dataclasses.replace(cfg, backward=dataclasses.replace(base, stagger_consumers=stagger))
      kw = dict(dropout_rate=dropout, dropout_rng=jax.random.key(3)) if dropout else {}
      f = lambda q, k, v: pf.flash_attention(q, k, v, is_causal=causal, implementation="mosaic", config=cfg, **kw)
      _, vjp = jax.vjp(f, q, kk, v)
      grads.append(jax.block_until_ready(vjp(do)))
    same = all(bool(jnp.array_equal(a, c)) for a, c in zip(*grads))
    print(f"causal={causal} dropout={dropout} default stagger={base.stagger_consumers}: dq dk dv bitwise equal with and without the stagger: {same}")
