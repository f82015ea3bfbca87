"""Mosaic forward with dropout 0.1, d128: forward config variants (softmax
overlap, block_kv) against the no-dropout default, interleaved.  argv: cells"""
import dataclasses, sys
import jax, jax.numpy as jnp
import pallas_flash as pf
from pallas_flash.mosaic.config import MosaicConfig
from benchmarks.mosaic_bench import cell_inputs
from benchmarks.timing import time_interleaved
drop = dict(dropout_rate=0.1, dropout_rng=jax.random.key(7))
for cell in sys.argv[1].split(","):
  h, t, c = cell.split("-"); h = int(h[1:]); t = int(t[:-1]) * 1024; causal = c == "C"
  b, n, (q, k, v), flops = cell_inputs(h, t, causal)
  base = MosaicConfig.default(h, causal, kv_seqlen=t)
  variants = {"nodrop": (base, {}), "drop": (base, drop),
              "drop overlap-off": (dataclasses.replace(base, overlap_softmax=False), drop),
              "drop bk64": (dataclasses.replace(base, block_kv=64), drop),
              "drop not-persistent": (dataclasses.replace(base, persistent=False, heads_inner=False), drop)}
  calls = {}
  for name, (cfg, kw) in variants.items():
    f = jax.jit(lambda q, k, v, cfg=cfg, kw=kw: pf.flash_attention(
        q, k, v, is_causal=causal, implementation="mosaic", config=cfg, **kw))
    try:
      jax.block_until_ready(f(q, k, v)); calls[name] = (f, (q, k, v))
    except Exception as e:
      print(f"  {name}: failed {type(e).__name__}: {str(e)[:200]}")
  times = time_interleaved(calls, 5, 0.03)
  for name in calls:
    print(f"{cell:12s} {name:22s} fwd {flops / times[name][0] / 1e12:6.1f} TFLOP/s  ratio to nodrop {times['nodrop'][0] / times[name][0]:.2f}", flush=True)
