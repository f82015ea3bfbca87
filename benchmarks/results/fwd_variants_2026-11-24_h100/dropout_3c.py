"""Run 106 (issue 14): the causal d128 forward with dropout 0.1 on three
consumers (not persistent, no softmax overlap) against its default (two,
persistent), forward and fwd+bwd (the backward at its default), with the
no-dropout default beside them; bf16, B x T = 16384 up to 16k, B1 16 heads
beyond.  One process, interleaved bursts (``time_interleaved``).

  python3 dropout_3c.py [SEQLEN ...]
"""
import dataclasses, os, sys
import jax, jax.numpy as jnp
import pallas_flash as pf
from pallas_flash.mosaic.config import MosaicConfig
from benchmarks.mosaic_bench import cell_inputs
from benchmarks.timing import time_interleaved

seqlens = [int(x) for x in sys.argv[1:]] or [8192, 16384, 32768, 131072]
calls, flops = {}, {}
for t in seqlens:
  b, n, (q, k, v), f_flops = cell_inputs(128, t, True)
  ct = jax.random.normal(jax.random.key(1), q.shape, jnp.float32)
  three = dataclasses.replace(MosaicConfig.default(128, True, kv_seqlen=t),
                              consumers=3, persistent=False,
                              overlap_softmax=False)
  rows = {"plain": ({}, None), "dropout": (dict(
      dropout_rate=0.1, dropout_rng=jax.random.key(7)), None)}
  rows["dropout 3c"] = (rows["dropout"][0], three)
  for name, (kw, cfg) in rows.items():
    fwd = lambda q, k, v, kw=kw, cfg=cfg: pf.flash_attention(
        q, k, v, is_causal=True, implementation="mosaic", config=cfg, **kw)
    loss = lambda q, k, v, fwd=fwd: (fwd(q, k, v).astype(jnp.float32) * ct).sum()
    both = jax.grad(loss, (0, 1, 2))
    for mode, f, fl in (("fwd", fwd, f_flops), ("fwd+bwd", both, 3.5 * f_flops)):
      key = (t, name, mode)
      calls[key] = (jax.jit(f).lower(q, k, v).compile(), (q, k, v))
      flops[key] = fl
      jax.block_until_ready(calls[key][0](q, k, v))
  print("compiled", t, flush=True)
tm = time_interleaved(calls, int(os.environ.get("REPS", 11)), 0.04)
print("d128 causal, TFLOP/s (causal FLOPs; spread); dropout 0.1")
print(f"{'S':>7s} {'mode':8s} {'plain':>13s} {'dropout':>13s} {'dropout 3c':>13s} {'3c/2c':>6s} {'drop/plain 2c':>13s} {'3c':>5s}")
for t in seqlens:
  for mode in ("fwd", "fwd+bwd"):
    r = {name: tm[(t, name, mode)] for name in ("plain", "dropout", "dropout 3c")}
    tf = {name: flops[(t, name, mode)] / x[0] / 1e12 for name, x in r.items()}
    print(f"{t:7d} {mode:8s} " + " ".join(f"{tf[nm]:6.1f} ({r[nm][1]:.2f})" for nm in r)
          + f" {tf['dropout 3c'] / tf['dropout']:6.3f} {tf['dropout'] / tf['plain']:13.3f} {tf['dropout 3c'] / tf['plain']:5.3f}", flush=True)
