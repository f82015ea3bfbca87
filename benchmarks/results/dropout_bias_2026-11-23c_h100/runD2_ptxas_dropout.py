"""ptxas register/spill report of the d128 Mosaic kernels (fwd + bwd), with or
without dropout; run with MOSAIC_GPU_DUMP_PTXAS=1.  argv: C|N drop|nodrop [fused]"""
import sys, dataclasses
import jax, jax.numpy as jnp
import pallas_flash as pf
from pallas_flash.mosaic.config import MosaicConfig, MosaicBackwardConfig
causal = sys.argv[1] == "C"
kw = dict(dropout_rate=0.1, dropout_rng=jax.random.key(0)) if sys.argv[2] == "drop" else {}
cfg = None
if len(sys.argv) > 3:
  cfg = MosaicConfig.default(128, causal, kv_seqlen=1024)
  cfg = dataclasses.replace(cfg, backward=dataclasses.replace(
      MosaicBackwardConfig.default(128, causal), fused=True))
q = jax.random.normal(jax.random.key(0), (1, 1024, 4, 128), jnp.bfloat16)
f = jax.jit(jax.grad(lambda q: pf.flash_attention(
    q, q, q, is_causal=causal, implementation="mosaic", config=cfg,
    **kw).astype(jnp.float32).sum()))
jax.block_until_ready(f(q))
