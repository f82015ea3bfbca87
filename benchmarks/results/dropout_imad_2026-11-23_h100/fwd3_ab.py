"""Run 55: run 53 read the d128 S16k N forward without dropout at 682 TFLOP/s
with three consumers (block_kv 128, not persistent, no overlap) against 647
for the default; again, with longer and causal cells, in one process."""
import dataclasses, os, sys, jax
import pallas_flash as pf
from pallas_flash.mosaic.config import MosaicConfig
from benchmarks.mosaic_bench import cell_inputs
from benchmarks.timing import time_interleaved

for cell in sys.argv[1].split(","):
  h, t, c = cell.split("-"); h = int(h[1:]); t = int(t[:-1]) * 1024; causal = c == "C"
  b, n, (q, k, v), flops = cell_inputs(h, t, causal)
  base = MosaicConfig.default(h, causal, kv_seqlen=t)
  variants = {"default": base,
              "3 cons bk128": dataclasses.replace(base, consumers=3, persistent=False,
                                                  overlap_softmax=False)}
  calls = {}
  for name, cfg in variants.items():
    f = lambda q, k, v, cfg=cfg: pf.flash_attention(q, k, v, is_causal=causal,
                                                    implementation="mosaic", config=cfg)
    calls[name] = (jax.jit(f).lower(q, k, v).compile(), (q, k, v))
  tm = time_interleaved(calls, int(os.environ.get("REPS", 7)), float(os.environ.get("SAMPLE_S", 0.03)))
  print(f"{cell}: forward TFLOP/s (spread)", flush=True)
  for name in variants:
    print(f"  {name:13s} {flops / tm[name][0] / 1e12:6.1f} ({tm[name][1]:.2f})", flush=True)
