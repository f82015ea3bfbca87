"""Run 85 helper: ptxas's report of the forward with Q in registers
(MosaicConfig.q_in_registers) against the default, d128 and d64, causal and
not, and whether the outputs are bitwise the default's."""
import dataclasses
import jax
import jax.numpy as jnp
import pallas_flash as pf
from pallas_flash.mosaic.config import MosaicConfig

for h, t in ((128, 4096), (64, 4096)):
  k = jax.random.split(jax.random.key(0), 3)
  q, kk, v = (jax.random.normal(x, (2, t, 2048 // h, h), jnp.bfloat16)
              for x in k)
  for causal in (False, True):
    base = MosaicConfig.default(h, causal, kv_seqlen=t)
    outs = []
    for regs in (False, True):
      print(f"d{h} causal={causal} q_in_registers={regs}", flush=True)
      cfg = dataclasses.replace(base, q_in_registers=regs)
      outs.append(jax.jit(lambda q, k, v: pf.flash_attention(
          q, k, v, is_causal=causal, implementation="mosaic",
          config=cfg))(q, kk, v))
    print(f"  bitwise equal: {bool(jnp.array_equal(*outs))}", flush=True)
