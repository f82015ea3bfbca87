"""Does the dQ kernel run on its own stream?  Prints the optimized HLO's
lines that mention the two backward kernels or async / stream attributes
for the d128 default with ``dq_stream=1``."""
import dataclasses
import re

import jax
import jax.numpy as jnp

import pallas_flash as pf
from pallas_flash.mosaic.config import MosaicBackwardConfig, MosaicConfig

q = jax.random.normal(jax.random.key(0), (1, 4096, 16, 128), jnp.bfloat16)
bwd = dataclasses.replace(MosaicBackwardConfig.default(128, False),
                          dq_stream=1)
cfg = dataclasses.replace(MosaicConfig.default(128, False, kv_seqlen=4096),
                          backward=bwd)
f = lambda q, k, v: pf.flash_attention(q, k, v, implementation="mosaic",
                                        config=cfg).sum()
text = jax.jit(jax.grad(f, (0, 1, 2))).lower(q, q, q).compile().as_text()
for line in text.splitlines():
  if re.search(r"mosaic_(dkdv|dq)|async|stream|wait", line) and (
      "ENTRY" not in line):
    print(line.strip()[:260])
