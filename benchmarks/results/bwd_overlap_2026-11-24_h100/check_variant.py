"""Runs 90-: ptxas's report of the d128 backward with a MosaicBackwardConfig
variant and whether its gradients are bitwise the default's (B2, T = S =
2048, 16 heads, causal and not; dropout 0.1 with --dropout).

  python3 check_variant.py overlap_steps=True [--dropout]"""
import dataclasses
import sys

import jax
import jax.numpy as jnp

from benchmarks.mosaic_bench import parse_variant
import pallas_flash as pf
from pallas_flash.mosaic.config import MosaicBackwardConfig, MosaicConfig

variant = parse_variant(sys.argv[1])
rate = 0.1 if "--dropout" in sys.argv else 0.0
k = jax.random.split(jax.random.key(0), 4)
shape = (2, 2048, 16, 128)
q, kk, v, do = (jax.random.normal(x, shape, jnp.bfloat16) for x in k)
drop = dict(dropout_rate=rate, dropout_rng=jax.random.key(3)) if rate else {}

for causal in (False, True):
  grads = []
  for var in ({}, variant):
    bwd = dataclasses.replace(MosaicBackwardConfig.default(128, causal,
                                                           rate > 0), **var)
    cfg = dataclasses.replace(MosaicConfig.default(128, causal, dropout=rate > 0),
                              backward=bwd)
    print(f"causal={causal} {var}", flush=True)
    f = lambda q, k, v: jnp.vdot(pf.flash_attention(
        q, k, v, is_causal=causal, implementation="mosaic", config=cfg,
        **drop), do)
    grads.append(jax.jit(jax.grad(f, (0, 1, 2)))(q, kk, v))
  same = [bool(jnp.array_equal(a, b)) for a, b in zip(*grads)]
  print(f"  bitwise equal to the default (dq, dk, dv): {same}", flush=True)
