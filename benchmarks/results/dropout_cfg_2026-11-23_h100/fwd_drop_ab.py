"""Run 65: d128 forward configs with dropout 0.1 that run 53 did not time:
two consumers with 64-key steps (a 64 x 64 score tile, so the overlap's
second tile costs what one 64 x 128 tile did), with and without the
overlap, 2 or 3 stages, and not persistent; against the dropout default
(two consumers, 128-key steps, overlap off) and no dropout's default.  One
process per call, interleaved bursts."""
import dataclasses, sys, jax
import pallas_flash as pf
from pallas_flash.mosaic.config import MosaicConfig
from benchmarks.mosaic_bench import cell_inputs
from benchmarks.timing import time_interleaved

for cell in sys.argv[1].split(","):
  h, t, c = cell.split("-"); h = int(h[1:]); t = int(t[:-1]) * 1024; causal = c == "C"
  b, n, (q, k, v), flops = cell_inputs(h, t, causal)
  drop = MosaicConfig.default(h, causal, kv_seqlen=t, dropout=True)
  r = dataclasses.replace
  variants = {
      "no dropout (default)": (None, 0.0),
      "dropout default": (drop, 0.1),
      "bk64 overlap": (r(drop, block_kv=64, overlap_softmax=True), 0.1),
      "bk64 overlap 3 st": (r(drop, block_kv=64, overlap_softmax=True, num_stages=3), 0.1),
      "bk64 no overlap 3 st": (r(drop, block_kv=64, num_stages=3), 0.1),
      "not persistent": (r(drop, persistent=False), 0.1),
  }
  calls = {}
  for name, (cfg, rate) in variants.items():
    kw = dict(dropout_rate=rate, dropout_rng=jax.random.key(7)) if rate else {}
    f = lambda q, k, v, cfg=cfg, kw=kw: pf.flash_attention(
        q, k, v, is_causal=causal, implementation="mosaic", config=cfg, **kw)
    try:
      calls[name] = (jax.jit(f).lower(q, k, v).compile(), (q, k, v))
    except Exception as e:
      print(cell, name, "failed", type(e).__name__, str(e)[:300], flush=True)
  tm = time_interleaved(calls, 7, 0.03)
  print(f"{cell}: forward TFLOP/s (spread), ratio to no dropout", flush=True)
  base = tm["no dropout (default)"][0]
  for name in calls:
    print(f"  {name:22s} {flops / tm[name][0] / 1e12:6.1f} ({tm[name][1]:.2f})  {base / tm[name][0]:.2f}",
          flush=True)
