"""Run 52: is the d128 Mosaic forward with dropout latency-bound (two consumer
warpgroups, each on a serial chain) rather than issue-bound?  Forward
TFLOP/s of forward configs with and without dropout 0.1 in one process:
the default (2 consumers, persistent, softmax overlap), softmax overlap off,
and three consumers (160 registers each; not persistent) with block_kv 128
and 64.  One jit per (config, dropout)."""
import dataclasses, sys, jax
import pallas_flash as pf
from pallas_flash.mosaic.config import MosaicConfig
from benchmarks.mosaic_bench import cell_inputs
from benchmarks.timing import time_interleaved

for cell in sys.argv[1].split(","):
  h, t, c = cell.split("-"); h = int(h[1:]); t = int(t[:-1]) * 1024; causal = c == "C"
  b, n, (q, k, v), flops = cell_inputs(h, t, causal)
  base = MosaicConfig.default(h, causal, kv_seqlen=t)
  variants = {
      "default": base,
      "overlap off": dataclasses.replace(base, overlap_softmax=False),
      "3 cons bk128": dataclasses.replace(base, consumers=3, persistent=False, overlap_softmax=False),
      "3 cons bk64": dataclasses.replace(base, consumers=3, block_kv=64, persistent=False,
                                         overlap_softmax=False, num_stages=3),
  }
  calls = {}
  for name, cfg in variants.items():
    for rate in (0.0, 0.1):
      kw = dict(dropout_rate=rate, dropout_rng=jax.random.key(7)) if rate else {}
      f = lambda q, k, v, cfg=cfg, kw=kw: pf.flash_attention(
          q, k, v, is_causal=causal, implementation="mosaic", config=cfg, **kw)
      try:
        calls[f"{name}|{rate}"] = (jax.jit(f).lower(q, k, v).compile(), (q, k, v))
      except Exception as e:
        print(cell, name, rate, "failed", type(e).__name__, str(e)[:300], flush=True)
  tm = time_interleaved(calls, 5, 0.03)
  print(f"{cell}: forward TFLOP/s without / with dropout 0.1, ratio", flush=True)
  for name in variants:
    r = [flops / tm[f"{name}|{x}"][0] / 1e12 if f"{name}|{x}" in tm else float("nan") for x in (0.0, 0.1)]
    print(f"  {name:13s} {r[0]:6.1f} {r[1]:6.1f}   {r[1] / r[0]:.2f}", flush=True)
