"""ptxas register/spill report of the d128 Mosaic ALiBi kernels (fwd + bwd),
run with MOSAIC_GPU_DUMP_PTXAS=1.  argv: C|N  [fixed axis of the split loops]"""
import sys
import jax, jax.numpy as jnp
import pallas_flash as pf
from pallas_flash.mosaic import forward
causal = sys.argv[1] == "C"
if len(sys.argv) > 2:
  forward._SPLIT_FIXED_AXIS = int(sys.argv[2])
q = jax.random.normal(jax.random.key(0), (1, 1024, 4, 128), jnp.bfloat16)
slopes = 2.0 ** (-8.0 * jnp.arange(1, 5, dtype=jnp.float32) / 4)
f = jax.jit(jax.grad(lambda q: pf.flash_attention(
    q, q, q, is_causal=causal, implementation="mosaic",
    alibi_slopes=slopes).astype(jnp.float32).sum()))
jax.block_until_ready(f(q))
