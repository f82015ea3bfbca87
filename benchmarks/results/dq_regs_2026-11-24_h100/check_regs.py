"""Run 83 helper: ptxas's report of the d128 backward kernels with the dQ
kernel's row tiles in registers (dq_rows_in_registers 0 / 1 / 2), and
whether the gradients are bitwise those of the default."""
import sys
import jax
import jax.numpy as jnp
import pallas_flash as pf
from pallas_flash.mosaic.config import MosaicBackwardConfig, MosaicConfig

causal = sys.argv[1] == "C"
k = jax.random.split(jax.random.key(0), 4)
shape = (2, 2048, 16, 128)
q, kk, v, do = (jax.random.normal(x, shape, jnp.bfloat16) for x in k)


def grads(n):
  cfg = MosaicConfig(backward=MosaicBackwardConfig(dq_rows_in_registers=n))
  f = lambda q, k, v: jnp.vdot(pf.flash_attention(
      q, k, v, is_causal=causal, implementation="mosaic", config=cfg), do)
  return jax.jit(jax.grad(f, (0, 1, 2)))(q, kk, v)


ref = grads(0)
for n in (1, 2):
  print(f"dq_rows_in_registers={n}", flush=True)
  g = grads(n)
  same = [bool(jnp.array_equal(a, b)) for a, b in zip(g, ref)]
  print(f"  bitwise equal to 0 (dq, dk, dv): {same}", flush=True)
