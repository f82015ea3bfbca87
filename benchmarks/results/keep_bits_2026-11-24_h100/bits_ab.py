"""The dropout forward with the producer's keep bits (``keep_bits``) against
the consumers' own (``forward.PRODUCER_KEEP_BITS = False``), in one process:
each config compiled twice as separate executables, timed interleaved
(``timing.interleaved_samples``), outputs compared bitwise with the old
form's; the no-dropout default forward in the same loop.

  python3 bits_ab.py d128-16k-C,d128-4k-N [field=value,...] ...

Each extra argument is a forward config variant taken with the new form.
"""
import dataclasses
import sys

import jax
import numpy as np

import pallas_flash as pf
from benchmarks.mosaic_bench import cell_inputs, parse_variant
from benchmarks.timing import interleaved_samples, paired_ratio
from pallas_flash.mosaic import forward
from pallas_flash.mosaic.config import MosaicConfig

RATE = 0.1
cells, variants = sys.argv[1].split(","), sys.argv[2:]
rng = jax.random.key(7)
for cell in cells:
  h, t, c = cell.split("-")
  h, t, causal = int(h[1:]), int(t[:-1]) * 1024, c == "C"
  b, n, (q, k, v), flops = cell_inputs(h, t, causal)
  default = MosaicConfig.default(h, causal, kv_seqlen=t, dropout=True)
  configs = {"old": (False, default), "new": (True, default)}
  for text in variants:
    configs[text] = (True, dataclasses.replace(default, **parse_variant(text)))
  calls, outs = {}, {}
  plain = jax.jit(lambda q, k, v: pf.flash_attention(
      q, k, v, is_causal=causal, implementation="mosaic"))
  calls["no dropout"] = (plain.lower(q, k, v).compile(), (q, k, v))
  for name, (bits, cfg) in configs.items():
    forward.PRODUCER_KEEP_BITS = bits  # read when the kernel is traced
    for rep in "ab":
      f = jax.jit(lambda q, k, v, cfg=cfg: pf.flash_attention(
          q, k, v, is_causal=causal, implementation="mosaic",
          dropout_rate=RATE, dropout_rng=rng, config=cfg))
      try:
        cf = f.lower(q, k, v).compile()
      except Exception as e:
        print(f"  {name}: failed: {type(e).__name__}: {str(e)[:400]}")
        break
      calls[f"{name} {rep}"] = (cf, (q, k, v))
      outs[name] = np.asarray(cf(q, k, v))
  forward.PRODUCER_KEEP_BITS = True
  samples, _ = interleaved_samples(calls, 15, 0.03)
  med = {name: float(np.median(xs)) for name, xs in samples.items()}
  print(f"{cell}: forward TFLOP/s with dropout {RATE} (two executables), "
        "paired ratio of old a's time to each (median [q25, q75])")
  print(f"  {'no dropout':28s} {flops / med['no dropout'] / 1e12:6.1f}")
  for name in outs:
    tf = [flops / med[f"{name} {r}"] / 1e12 for r in "ab"]
    q25, q50, q75 = paired_ratio(samples["old a"], samples[f"{name} a"])
    same = bool(np.array_equal(outs[name], outs["old"]))
    print(f"  {name:28s} {tf[0]:6.1f} {tf[1]:6.1f}  "
          f"{q50:.3f} [{q25:.3f}, {q75:.3f}]  bitwise={same}", flush=True)
