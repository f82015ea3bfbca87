"""Run 104: d128 S16k N with ALiBi, fwd+bwd of the default backward (staggered consumers) against
stagger_consumers=False, and without ALiBi the same pair, in one process (interleaved bursts)."""
import dataclasses

import jax
import jax.numpy as jnp

from benchmarks import bwd_bench, mosaic_bench
from benchmarks.timing import time_interleaved
import pallas_flash as pf
from pallas_flash.mosaic.config import MosaicBackwardConfig, MosaicConfig

h, t, causal = 128, 16384, False
b, n, (q, k, v), flops = mosaic_bench.cell_inputs(h, t, causal)
do = jax.random.normal(jax.random.key(99), q.shape, jnp.bfloat16)
calls = {}
for alibi in (False, True):
  for stagger in (True, False):
    fwd = MosaicConfig.default(h, causal, kv_seqlen=t, alibi=alibi)
    cfg = dataclasses.replace(fwd, backward=dataclasses.replace(
        MosaicBackwardConfig.default(h, causal), stagger_consumers=stagger))
    kw = dict(alibi_slopes=bwd_bench.alibi_slopes(n)) if alibi else {}
    f = lambda q, k, v, cfg=cfg, kw=kw: pf.flash_attention(q, k, v, is_causal=causal, implementation="mosaic",
                                                          config=cfg, **kw)
    name = f"{'alibi' if alibi else 'plain'} stagger={stagger}"
    calls[name] = (bwd_bench.fwd_bwd(f), (q, k, v, do))
    calls[name + " fwd"] = (jax.jit(f), (q, k, v))
for name, (fn, args) in calls.items():
  jax.block_until_ready(fn(*args))
times = time_interleaved(calls, 7, 0.03)
for name in calls:
  if name.endswith("fwd"):
    continue
  fb, fw = times[name][0], times[name + " fwd"][0]
  print(f"{name:22s} fwd+bwd {3.5 * flops / fb / 1e12:6.1f}  bwd {2.5 * flops / (fb - fw) / 1e12:6.1f} TFLOP/s")
