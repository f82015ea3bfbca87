"""Backward config A/B with dropout 0.1 in one process (as
``bwd_ab_2026-11-24_h100/cfg_ab.py``, which times without dropout): for each
cell, the dropout default backward config (``MosaicBackwardConfig.default(...,
dropout=True)``) and each variant (``field=value,...``), each compiled twice as
separate executables and timed interleaved, so the two readings of one config
show the spread; gradients compared bitwise with the default's.  The forward
(the dropout default, and ``fwd:field=value`` forward variants) is timed in
the same loop; the backward's time is fwd+bwd less the default forward.

  python3 drop_ab.py d128-16k-C,d128-4k-C dq_rows_in_registers=1 fwd:consumers=3

With ``AB_FEATURE=alibi`` (run 142 on) the same A/B with ALiBi (bwd_bench's
slopes) instead of dropout, against the ALiBi defaults.  From run 142 on the
default backward config also gets the cell's sequence length; in runs 140-141
it did not (so at S16k C their default lacked the stagger).  After run 159
the default reads no lengths (``kv_seqlen`` dropped from the call) and takes
``alibi`` (before, the ALiBi A/Bs' baseline was the no-ALiBi default).
"""
import dataclasses
import os
import sys

import jax
import jax.numpy as jnp

import pallas_flash as pf
from benchmarks.bwd_bench import alibi_slopes
from benchmarks.mosaic_bench import cell_inputs, mosaic_kernels, parse_variant
from benchmarks.timing import time_interleaved
from pallas_flash.mosaic.config import MosaicBackwardConfig, MosaicConfig

ALIBI = os.environ.get("AB_FEATURE", "dropout") == "alibi"
RATE = 0.0 if ALIBI else 0.1
FEATURE = "alibi" if ALIBI else f"dropout {RATE}"
cells, variants = sys.argv[1].split(","), sys.argv[2:]
rng = jax.random.key(7)
for cell in cells:
  h, t, c = cell.split("-")
  h, t, causal = int(h[1:]), int(t[:-1]) * 1024, c == "C"
  b, n, (q, k, v), flops = cell_inputs(h, t, causal)
  do = jax.random.normal(jax.random.key(99), q.shape, jnp.bfloat16)
  fwd_default = MosaicConfig.default(h, causal, kv_seqlen=t, dropout=not ALIBI,
                                     alibi=ALIBI)
  bwd_default = MosaicBackwardConfig.default(h, causal, dropout=not ALIBI,
                                             alibi=ALIBI)
  feature = (dict(alibi_slopes=alibi_slopes(n)) if ALIBI else
             dict(dropout_rate=RATE, dropout_rng=rng))
  fwd_configs, bwd_configs = {"default": fwd_default}, {"default": bwd_default}
  for text in variants:
    if text.startswith("fwd:"):
      fwd_configs[text] = dataclasses.replace(fwd_default,
                                              **parse_variant(text[4:]))
    else:
      bwd_configs[text] = dataclasses.replace(bwd_default,
                                              **parse_variant(text))

  def attn(fwd_cfg, bwd):
    return lambda q, k, v: pf.flash_attention(
        q, k, v, is_causal=causal, implementation="mosaic", **feature,
        config=dataclasses.replace(fwd_cfg, backward=bwd))

  def grads_fn(bwd):
    f = attn(fwd_default, bwd)
    def g(q, k, v, do):
      _, vjp = jax.vjp(f, q, k, v)
      return vjp(do)
    return g

  calls, grads, outs, kernels = {}, {}, {}, {}
  for name, cfg in fwd_configs.items():
    try:
      cf = jax.jit(attn(cfg, bwd_default)).lower(q, k, v).compile()
    except Exception as e:
      print(f"  fwd {name}: failed: {type(e).__name__}: {str(e)[:300]}")
      continue
    calls[f"fwd {name}"] = (cf, (q, k, v))
    outs[name] = cf(q, k, v)
  for name, bwd in bwd_configs.items():
    for rep in "ab":  # two executables of one config: the spread
      try:
        cg = jax.jit(grads_fn(bwd)).lower(q, k, v, do).compile()
      except Exception as e:
        print(f"  {name}: failed: {type(e).__name__}: {str(e)[:300]}")
        break
      calls[f"{name} {rep}"] = (cg, (q, k, v, do))
      grads[name], kernels[name] = cg(q, k, v, do), mosaic_kernels(cg)
  same = {name: all(bool(jnp.array_equal(x, y)) for x, y in
                    zip(grads[name], grads["default"])) for name in grads}
  tm = time_interleaved(calls, 9, 0.03)
  fwd_s = tm["fwd default"][0]
  print(f"{cell} ({FEATURE}): forward TFLOP/s")
  for name in outs:
    print(f"  fwd {name:24s} {flops / tm[f'fwd {name}'][0] / 1e12:6.1f}  "
          f"bitwise={bool(jnp.array_equal(outs[name], outs['default']))}")
  print(f"{cell} ({FEATURE}): backward TFLOP/s (two executables), "
        "ratio to the default's mean")
  base = None
  for name in grads:
    rs = [2.5 * flops / (tm[f"{name} {r}"][0] - fwd_s) / 1e12 for r in "ab"]
    base = base or sum(rs) / 2
    print(f"  {name:32s} {rs[0]:6.1f} {rs[1]:6.1f}  "
          f"{rs[0] / base:.3f} {rs[1] / base:.3f}  bitwise={same[name]} "
          f"mosaic_kernels={kernels[name]}", flush=True)
