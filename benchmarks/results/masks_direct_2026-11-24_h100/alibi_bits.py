"""Run 133 (H100): run 132 found ALiBi's S4k N gradients not bitwise equal
with and without the staggered consumers.  Here: the forward outputs of the
two configs, each backward run twice (determinism), and which of dQ / dK /
dV differ, with ALiBi and without (d128, bf16, B4 S4k N 16 heads)."""
import dataclasses
import jax, jax.numpy as jnp
import pallas_flash as pf
from pallas_flash.mosaic.config import MosaicBackwardConfig, MosaicConfig
from benchmarks.mosaic_bench import cell_inputs

b, n, (q, k, v), fl = cell_inputs(128, 4096, False)
do = jax.random.normal(jax.random.key(99), q.shape, jnp.bfloat16)
slopes = 2.0 ** (-8.0 * jnp.arange(1, n + 1) / n)
for alibi in (False, True):
  kw = dict(alibi_slopes=slopes) if alibi else {}
  fcfg = MosaicConfig.default(128, False, kv_seqlen=4096, alibi=alibi)
  res = {}
  for stagger in (True, False):
    cfg = dataclasses.replace(fcfg, backward=dataclasses.replace(
        MosaicBackwardConfig.default(128, False), stagger_consumers=stagger))
    f = lambda q, k, v, cfg=cfg: pf.flash_attention(
        q, k, v, implementation="mosaic", config=cfg, **kw)
    g = jax.jit(lambda q, k, v, do, f=f: (f(q, k, v),
                                          *jax.vjp(f, q, k, v)[1](do)))
    r1, r2 = g(q, k, v, do), g(q, k, v, do)
    same = [bool(jnp.array_equal(x, y)) for x, y in zip(r1, r2)]
    print(f"alibi={alibi} stagger={stagger}: out, dq, dk, dv equal over two "
          f"runs: {same}", flush=True)
    res[stagger] = r1
  same = [bool(jnp.array_equal(x, y)) for x, y in zip(res[True], res[False])]
  diff = [float(jnp.max(jnp.abs(x.astype(jnp.float32) - y.astype(jnp.float32))))
          for x, y in zip(res[True], res[False])]
  print(f"alibi={alibi}: stagger vs not, out, dq, dk, dv equal: {same}, "
        f"max abs diff {diff}", flush=True)
