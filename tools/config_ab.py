"""Backward config A/B in one process: for each cell, the backward default
and each variant (``field=value,...``, ``MosaicBackwardConfig`` fields
replacing the default's), each compiled twice as separate executables and
timed interleaved with the forward alone (``timing.time_interleaved``;
backward = fwd+bwd - fwd), so the two readings of one config show the
spread; dQ, dK, dV of each variant are compared bitwise with the default's,
and each executable's Mosaic GPU kernel count is printed (a config that
``check_supported`` sends to the triton backward counts 1).

A cell is ``d128-4k-N`` (issue 12's workload: head dim, T, causal or not),
optionally with features: ``+drop`` (dropout 0.1), ``+alibi`` (slopes
2^(-8 i / N)), ``+cap`` (soft-cap 30); the baseline is the backward default
for those features (``MosaicBackwardConfig.default``).

  python3 -m tools.config_ab d128-16k-N,d128-4k-C+cap row_ring=True [...]
"""
import dataclasses
import sys

import jax
import jax.numpy as jnp

import pallas_flash as pf
from benchmarks.mosaic_bench import cell_inputs, mosaic_kernels, parse_variant
from benchmarks.timing import time_interleaved
from benchmarks.workloads import alibi_slopes
from pallas_flash.mosaic.config import MosaicBackwardConfig, MosaicConfig


FEATURES = {  # cell suffix -> flash_attention keyword arguments
    "drop": lambda n: dict(dropout_rate=0.1, dropout_rng=jax.random.key(7)),
    "alibi": lambda n: dict(alibi_slopes=alibi_slopes(n)),
    "cap": lambda n: dict(logits_soft_cap=30.0),
}


def cell_ab(cell: str, variants: list[str]) -> None:
  """Times one cell's default and variants; prints its table."""
  shape, *feats = cell.split("+")
  h, t, c = shape.split("-")
  h, t, causal = int(h[1:]), int(t[:-1]) * 1024, c == "C"
  b, n, (q, k, v), flops = cell_inputs(h, t, causal)
  do = jax.random.normal(jax.random.key(99), q.shape, jnp.bfloat16)
  kw = {"is_causal": causal}
  for feat in feats:
    kw.update(FEATURES[feat](n))
  fwd_cfg = MosaicConfig.default(h, causal, kv_seqlen=t)
  bwd_default = MosaicBackwardConfig.default(
      h, causal, dropout="drop" in feats, alibi="alibi" in feats,
      soft_cap="cap" in feats)
  configs = {"default": bwd_default}
  for text in variants:
    configs[text] = dataclasses.replace(bwd_default, **parse_variant(text))

  def attn(bwd):
    return lambda q, k, v: pf.flash_attention(
        q, k, v, implementation="mosaic",
        config=dataclasses.replace(fwd_cfg, backward=bwd), **kw)

  def grads_fn(bwd):
    f = attn(bwd)
    def g(q, k, v, do):
      _, vjp = jax.vjp(f, q, k, v)
      return vjp(do)
    return g

  calls, grads, kernels = {}, {}, {}
  calls["fwd"] = (jax.jit(attn(bwd_default)).lower(q, k, v).compile(),
                  (q, k, v))
  for name, bwd in configs.items():
    for rep in "ab":  # two executables of one config: the spread
      try:
        cg = jax.jit(grads_fn(bwd)).lower(q, k, v, do).compile()
      except Exception as e:
        print(f"  {name}: failed: {type(e).__name__}: {str(e)[:300]}")
        break
      calls[f"{name} {rep}"] = (cg, (q, k, v, do))
      kernels[name] = mosaic_kernels(cg)
      grads[name] = cg(q, k, v, do)
  same = {name: all(bool(jnp.array_equal(x, y)) for x, y in
                    zip(grads[name], grads["default"])) for name in grads}
  tm = time_interleaved(calls, 9, 0.03)
  fwd_s = tm["fwd"][0]
  print(f"{cell}: backward TFLOP/s (spread), ratio to the default's mean; "
        f"forward {flops / fwd_s / 1e12:.1f}")
  base = None
  for name in grads:
    rs = [2.5 * flops / (tm[f"{name} {r}"][0] - fwd_s) / 1e12 for r in "ab"]
    base = base or sum(rs) / 2
    print(f"  {name:34s} {rs[0]:6.1f} {rs[1]:6.1f}  "
          f"{rs[0] / base:.3f} {rs[1] / base:.3f}  bitwise={same[name]} "
          f"mosaic_kernels={kernels[name]}", flush=True)


def main(argv=None):
  argv = sys.argv[1:] if argv is None else argv
  for cell in argv[0].split(","):
    cell_ab(cell, argv[1:])


if __name__ == "__main__":
  main()
