"""ptxas's register lines (registers, spills, the C7512 serialization note)
for the backward kernels of each backward config variant at one cell:
  MOSAIC_GPU_DUMP_PTXAS=1 python3 ptxas_variant.py d128-4k-N "defer_dkdv_wait=True" ...
(the default config first)."""
import dataclasses
import sys

import jax
import jax.numpy as jnp

import pallas_flash as pf
from benchmarks.mosaic_bench import cell_inputs, parse_variant
from pallas_flash.mosaic.config import MosaicBackwardConfig, MosaicConfig

h, t, c = sys.argv[1].split("-")
h, t, causal = int(h[1:]), int(t[:-1]) * 1024, c == "C"
b, n, (q, k, v), _ = cell_inputs(h, t, causal)
for text in ["", *sys.argv[2:]]:
  bwd = MosaicBackwardConfig.default(h, causal)
  if text:
    bwd = dataclasses.replace(bwd, **parse_variant(text))
  cfg = dataclasses.replace(MosaicConfig.default(h, causal, kv_seqlen=t),
                            backward=bwd)
  print(f"==== variant {text or 'default'}", flush=True)
  f = lambda q, k, v: pf.flash_attention(q, k, v, is_causal=causal,
                                          implementation="mosaic",
                                          config=cfg).astype(jnp.float32).sum()
  jax.block_until_ready(jax.jit(jax.grad(f, (0, 1, 2)))(q, k, v))
