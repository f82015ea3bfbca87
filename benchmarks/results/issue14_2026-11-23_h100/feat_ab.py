"""Run 63: the d128 non-causal forward from S = 16k takes three consumers
(runs 55-57) unless dropout, ALiBi (run 62) or every tile is masked.  With
the other features of the contract (soft-cap, sliding window, kv lengths,
GQA, fp16) it was only tested, not timed: the default against the two-consumer
config (persistent, softmax overlap), forward TFLOP/s, one process, B1 S16k
16 heads.  Run 66: ``python3 feat_ab.py 64`` times d64's three-consumer
default (non-causal, S >= 16k, older) the same way, ALiBi and dropout
included (B1 S16k 32 heads)."""
import os, sys, jax, jax.numpy as jnp
import pallas_flash as pf
from pallas_flash.mosaic.config import MosaicConfig
from benchmarks.mosaic_bench import cell_inputs
from benchmarks.timing import time_interleaved

h, t = int(sys.argv[1]) if len(sys.argv) > 1 else 128, 16384
b, n, (q, k, v), flops = cell_inputs(h, t, False)
two = MosaicConfig.default(h, False)  # the S4k entry: 2 consumers
lengths = jnp.full((b,), 12288, jnp.int32)
features = {
    "plain": {},
    "soft-cap 30": dict(logits_soft_cap=30.0),
    "window 2048": dict(local_window_size=(2048, 2048)),
    "kv lengths 12k": dict(key_value_seq_lengths=lengths),
    "gqa 4:1": dict(gqa=True),
    "fp16": dict(fp16=True),
}
if h == 64:
  features["alibi"] = dict(alibi_slopes=2.0 ** (-8.0 * jnp.arange(1, n + 1) / n))
  features["dropout 0.1"] = dict(dropout_rate=0.1, dropout_rng=jax.random.key(7))
calls, sizes = {}, {}
for name, kw in features.items():
  kw = dict(kw)
  qq, kk, vv = q, k, v
  if kw.pop("gqa", False):
    kk, vv = k[:, :, :n // 4], v[:, :, :n // 4]
  if kw.pop("fp16", False):
    qq, kk, vv = (x.astype(jnp.float16) for x in (qq, kk, vv))
  for label, cfg in (("default", None), ("2 consumers", two)):
    f = lambda q, k, v, cfg=cfg, kw=kw: pf.flash_attention(
        q, k, v, implementation="mosaic", config=cfg, **kw)
    calls[(name, label)] = (jax.jit(f).lower(qq, kk, vv).compile(), (qq, kk, vv))
tm = time_interleaved(calls, int(os.environ.get("REPS", 7)), 0.03)
print(f"d{h} S16k N forward TFLOP/s (dense FLOPs; spread)")
print(f"{'feature':16s} {'default':>14s} {'2 consumers':>14s} {'ratio':>6s}")
for name in features:
  d, c2 = tm[(name, "default")], tm[(name, "2 consumers")]
  print(f"{name:16s} {flops / d[0] / 1e12:8.1f} ({d[1]:.2f}) {flops / c2[0] / 1e12:8.1f} ({c2[1]:.2f})"
        f" {c2[0] / d[0]:6.2f}", flush=True)
