"""The d128 non-causal default (240 registers per dK/dV consumer) against the
same config at 232 (``dkdv_registers=None``) on shapes beside issue 12's
cells: GQA 32/8, packed sequences (segment ids: every tile masked), a padded
head dim (96), fp16, a soft-cap, ragged kv lengths.  Each config compiled
twice, timed interleaved (``benchmarks.timing.time_interleaved``) with the
forward alone, whose time is taken off; gradients compared bitwise.

  python3 shapes_ab.py      # non-causal: the default (240) against 232
  python3 shapes_ab.py C    # causal: the default (232) against 240
"""
import sys
import dataclasses

import jax
import jax.numpy as jnp

import pallas_flash as pf
from benchmarks.mosaic_bench import mosaic_kernels
from benchmarks.timing import time_interleaved
from pallas_flash.mosaic.config import MosaicBackwardConfig, MosaicConfig

SHAPES = {  # name: (b, t, n, kv heads, h, dtype, extra kwargs)
    "gqa 32/8 S4k": (2, 4096, 32, 8, 128, jnp.bfloat16, {}),
    "packed S4k (8 segments)": (4, 4096, 16, 16, 128, jnp.bfloat16,
                                {"segments": 8}),
    "d96 S4k": (4, 4096, 16, 16, 96, jnp.bfloat16, {}),
    "fp16 S4k": (4, 4096, 16, 16, 128, jnp.float16, {}),
    "soft-cap 30 S4k": (4, 4096, 16, 16, 128, jnp.bfloat16,
                        {"logits_soft_cap": 30.0}),
    "kv lengths S4k (ragged)": (4, 4096, 16, 16, 128, jnp.bfloat16,
                                {"kv_lengths": True}),
}

for name, (b, t, n, kh, h, dtype, extra) in SHAPES.items():
  kw = {}
  ks = jax.random.split(jax.random.key(0), 4)
  q = jax.random.normal(ks[0], (b, t, n, h), dtype)
  k = jax.random.normal(ks[1], (b, t, kh, h), dtype)
  v = jax.random.normal(ks[2], (b, t, kh, h), dtype)
  do = jax.random.normal(ks[3], q.shape, dtype)
  if "segments" in extra:
    seg = jnp.broadcast_to(jnp.arange(t) // (t // extra["segments"]), (b, t))
    kw.update(query_segment_ids=seg, key_value_segment_ids=seg)
  if "logits_soft_cap" in extra:
    kw["logits_soft_cap"] = extra["logits_soft_cap"]
  if "kv_lengths" in extra:
    kw["key_value_seq_lengths"] = jnp.array([t, t - 333, t // 2 + 1, 1000][:b],
                                            jnp.int32)
  causal = sys.argv[1:] == ["C"]
  kw["is_causal"] = causal
  fwd_cfg = MosaicConfig.default(128, causal, kv_seqlen=t)
  new = MosaicBackwardConfig.default(128, causal)
  if causal:
    configs = {"240": dataclasses.replace(new, dkdv_registers=240),
               "232": new}
  else:
    configs = {"default (240)": new,
               "232": dataclasses.replace(new, dkdv_registers=None)}
  calls, grads, kernels = {}, {}, {}
  fwd = jax.jit(lambda q, k, v: pf.flash_attention(
      q, k, v, implementation="mosaic",
      config=dataclasses.replace(fwd_cfg, backward=new), **kw))
  calls["fwd"] = (fwd.lower(q, k, v).compile(), (q, k, v))
  for cname, bwd in configs.items():
    cfg = dataclasses.replace(fwd_cfg, backward=bwd)

    def g(q, k, v, do, cfg=cfg):
      f = lambda q, k, v: pf.flash_attention(q, k, v, implementation="mosaic",
                                             config=cfg, **kw)
      _, vjp = jax.vjp(f, q, k, v)
      return vjp(do)
    for rep in "ab":
      cg = jax.jit(g).lower(q, k, v, do).compile()
      calls[f"{cname} {rep}"] = (cg, (q, k, v, do))
      grads[cname], kernels[cname] = cg(q, k, v, do), mosaic_kernels(cg)
  same = all(bool(jnp.array_equal(x, y)) for x, y in
             zip(*grads.values()))
  tm = time_interleaved(calls, 9, 0.03)
  bwd_s = {c: tm[c][0] - tm["fwd"][0] for c in calls if c != "fwd"}
  base = (bwd_s["232 a"] + bwd_s["232 b"]) / 2
  ratios = " ".join(f"{c}: {base / bwd_s[c]:.3f}" for c in bwd_s)
  print(f"{name}: backward (fwd+bwd less fwd) speed relative to 232's mean  "
        f"{ratios}  bitwise={same} mosaic_kernels={kernels}", flush=True)
