"""Run 74: dropout with the paired keep bits (one word per query pair
(i, i + 8) and key, f16x2 compare: ``dropout.keep``; Mosaic kernels in PTX,
``forward._keep_select``), against no dropout, in one process.  d128,
dropout 0.1, forward and fwd+bwd; the Pallas-Triton kernels too at S4k.
Interleaved bursts; the forward output with dropout is also checked against
the f32 XLA reference (same key).  Run 75 adds forward configs with dropout
(``--configs``): the softmax overlap on, and (non-causal S16k) three
consumers, each timed against the same kernels' no-dropout default.  Run 77
(``--more``): with dropout, three forward consumers where the default has
two, and three consumers in the dQ kernel.  Run 80 (``--fold``): the folded
word (``dropout.fold``, one LEA.HI per word) against the unfolded one
(``forward.FOLD = False``: wrong bits, timing only; the switch is in commit
2ff639a, not in main)."""
import dataclasses
import sys, jax, jax.numpy as jnp
import pallas_flash as pf
from pallas_flash.mosaic import forward as mosaic_forward
from pallas_flash.mosaic.config import MosaicBackwardConfig, MosaicConfig
from benchmarks.mosaic_bench import cell_inputs
from benchmarks.timing import time_interleaved

for cell in sys.argv[1].split(","):
  h, t, c = cell.split("-"); h = int(h[1:]); t = int(t[:-1]) * 1024; causal = c == "C"
  b, n, (q, k, v), flops = cell_inputs(h, t, causal)
  ct = jax.random.normal(jax.random.key(3), q.shape, q.dtype)
  impls = ("mosaic", "triton") if t <= 4096 else ("mosaic",)
  variants = [(impl, rate, None, "") for impl in impls for rate in (0.0, 0.1)]
  if "--configs" in sys.argv:
    base = MosaicConfig.default(h, causal, kv_seqlen=t, q_seqlen=t, dropout=True)
    variants.append(("mosaic", 0.1, dataclasses.replace(base, overlap_softmax=True),
                     " overlap"))
    if not causal and t >= 16384:
      variants.append(("mosaic", 0.1, dataclasses.replace(
          base, consumers=3, persistent=False, overlap_softmax=False), " 3 consumers"))
  if "--more" in sys.argv:
    variants = [v for v in variants if v[0] == "mosaic"]
    base = MosaicConfig.default(h, causal, kv_seqlen=t, q_seqlen=t, dropout=True)
    if base.consumers == 2:
      variants.append(("mosaic", 0.1, dataclasses.replace(
          base, consumers=3, persistent=False, overlap_softmax=False), " fwd 3c"))
    bwd = dataclasses.replace(MosaicBackwardConfig.default(h, causal, dropout=True),
                              dq_consumers=3)
    variants.append(("mosaic", 0.1, dataclasses.replace(base, backward=bwd), " dq 3c"))
  if "--fold" in sys.argv:
    variants = [v for v in variants if v[0] == "mosaic"]
    variants.append(("mosaic", 0.1, None, " nofold"))
  calls, names = {}, []
  for impl, rate, config, tag in variants:
    mosaic_forward.FOLD = tag != " nofold"
    name = f"{impl} {'dropout' if rate else 'no dropout'}{tag}"
    kw = dict(dropout_rate=rate, dropout_rng=jax.random.key(7)) if rate else {}
    if config is not None:
      kw["config"] = config
    f = lambda q, k, v, kw=kw, impl=impl: pf.flash_attention(
        q, k, v, is_causal=causal, implementation=impl, **kw)
    g = jax.grad(lambda q, k, v, f=f: jnp.vdot(f(q, k, v).astype(jnp.float32),
                                               ct.astype(jnp.float32)), argnums=(0, 1, 2))
    try:
      cf = jax.jit(f).lower(q, k, v).compile()
      cg = jax.jit(g).lower(q, k, v).compile()
    except Exception as e:
      print(cell, name, "failed", type(e).__name__, str(e)[:600], flush=True)
      continue
    names.append(name)
    calls[name + " fwd"] = (cf, (q, k, v))
    calls[name + " fwd+bwd"] = (cg, (q, k, v))
    if rate and not tag and t <= 4096:  # one batch row, two heads
      qs, ks, vs = (x[:1, :, :2] for x in (q, k, v))
      mask = pf.dropout_mask(jax.random.key(7), (1, 2, t, t), 0.1)
      out = pf.flash_attention(qs, ks, vs, is_causal=causal, implementation=impl,
                               dropout_rate=0.1, dropout_rng=jax.random.key(7))
      ref = pf.flash_attention(*(x.astype(jnp.float32) for x in (qs, ks, vs)),
                               is_causal=causal, implementation="xla",
                               dropout_rate=0.1, dropout_rng=jax.random.key(7))
      err = float(jnp.max(jnp.abs(out.astype(jnp.float32) - ref)))
      print(f"{cell} {name}: max |out - reference| {err:.4f}, keep rate "
            f"{float(mask.mean()):.4f}", flush=True)
  mosaic_forward.FOLD = True
  tm = time_interleaved(calls, 7, 0.03)
  print(f"{cell}: TFLOP/s (spread), ratio to the same kernels without dropout", flush=True)
  for kind, mult in (("fwd", 1.0), ("fwd+bwd", 3.5)):
    for name in names:
      key = f"{name} {kind}"
      base = tm.get(name.split()[0] + " no dropout " + kind, (float("nan"),))[0]
      print(f"  {key:26s} {mult * flops / tm[key][0] / 1e12:6.1f} ({tm[key][1]:.2f})"
            f"  {base / tm[key][0]:.3f}", flush=True)
