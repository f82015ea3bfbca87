"""Run 132 (H100), one process, interleaved bursts, each variant compiled
twice (a / b: the spread), bf16, B x T = 16384, 16 heads, d128.

1. ``masks.position_visible`` (the d128 forward's element-wise mask on its
   masked tiles) in three forms, causal forward S4k / S16k, outputs bitwise
   equal: ``old`` (three compares, main before 0606e91), ``span`` (the
   per-element ``visible_span`` of 0606e91: twice old's integer ops),
   ``direct`` (``_span``'s lo / hi compared directly: today's code).
2. ALiBi at S4k N, fwd and fwd+bwd: the default, without the staggered
   consumers, and with one loop over the tiles (``alibi_split`` -> None:
   each tile's side traced) against no bias.
"""
import dataclasses, sys
import jax, jax.numpy as jnp
import pallas_flash as pf
from pallas_flash import masks
from pallas_flash.mosaic import forward as fwd
from pallas_flash.mosaic.config import MosaicBackwardConfig, MosaicConfig
from benchmarks.mosaic_bench import cell_inputs
from benchmarks.timing import time_interleaved

DIRECT = masks.position_visible


def old_pv(spec, q_pos, k_pos, q_len, kv_len, offset):
  ok = (q_pos < q_len) & (k_pos < kv_len)
  if spec.is_causal:
    ok &= k_pos <= q_pos + offset
  if spec.window is not None:
    left, right = spec.window
    ok &= (k_pos >= q_pos + offset - left) & (k_pos <= q_pos + offset + right)
  return ok


def span_pv(spec, q_pos, k_pos, q_len, kv_len, offset):
  lo, n = masks.visible_span(spec, q_pos, q_len, kv_len, offset)
  d = k_pos - lo
  return (d >= 0) & (d < n)


PV = {"old": old_pv, "span": span_pv, "direct": DIRECT}
ALIBI_SPLIT = fwd.alibi_split


def compile_with(patch, fn, *args):
  """Compile fn(*args) with masks.position_visible / fwd.alibi_split patched."""
  pv, split = patch
  masks.position_visible, fwd.alibi_split = pv, split
  try:
    c = jax.jit(fn).lower(*args).compile()
    out = jax.block_until_ready(c(*args))
  finally:
    masks.position_visible, fwd.alibi_split = DIRECT, ALIBI_SPLIT
  return c, out


calls, flops, outs = {}, {}, {}
part = sys.argv[1] if len(sys.argv) > 1 else "all"
if part in ("all", "mask"):
  for t in (4096, 16384):
    b, n, (q, k, v), fl = cell_inputs(128, t, True)
    for name, pv in PV.items():
      for rep in "ab":
        f = lambda q, k, v: pf.flash_attention(q, k, v, is_causal=True,
                                               implementation="mosaic")
        key = f"S{t // 1024}kC fwd {name} {rep}"
        c, outs[key] = compile_with((pv, ALIBI_SPLIT), f, q, k, v)
        calls[key], flops[key] = (c, (q, k, v)), fl
    ref = outs[f"S{t // 1024}kC fwd old a"]
    for key in [x for x in outs if x.startswith(f"S{t // 1024}kC")]:
      print(key, "bitwise equal to old:", bool(jnp.array_equal(outs[key], ref)),
            flush=True)
if part in ("all", "alibi"):
  b, n, (q, k, v), fl = cell_inputs(128, 4096, False)
  do = jax.random.normal(jax.random.key(99), q.shape, jnp.bfloat16)
  slopes = 2.0 ** (-8.0 * jnp.arange(1, n + 1) / n)
  fcfg = MosaicConfig.default(128, False, kv_seqlen=4096, alibi=True)
  nostagger = dataclasses.replace(
      fcfg, backward=dataclasses.replace(
          MosaicBackwardConfig.default(128, False), stagger_consumers=False))
  rows = {"plain": (None, None, ALIBI_SPLIT),
          "alibi": (slopes, None, ALIBI_SPLIT),
          "alibi no stagger": (slopes, nostagger, ALIBI_SPLIT),
          "alibi one loop": (slopes, None, lambda *a, **kw: None)}
  for name, (sl, cfg, split) in rows.items():
    kw = {} if sl is None else dict(alibi_slopes=sl)
    f = lambda q, k, v, kw=kw, cfg=cfg: pf.flash_attention(
        q, k, v, implementation="mosaic", config=cfg, **kw)
    g = lambda q, k, v, do, f=f: jax.vjp(f, q, k, v)[1](do)
    c, _ = compile_with((DIRECT, split), f, q, k, v)
    calls[f"S4kN {name} fwd"], flops[f"S4kN {name} fwd"] = (c, (q, k, v)), fl
    c, gr = compile_with((DIRECT, split), g, q, k, v, do)
    calls[f"S4kN {name} fb"] = (c, (q, k, v, do))
    flops[f"S4kN {name} fb"] = 3.5 * fl
    outs[name] = gr
  for name in ("alibi no stagger", "alibi one loop"):
    same = all(bool(jnp.array_equal(x, y)) for x, y in
               zip(outs[name], outs["alibi"]))
    print(name, "gradients bitwise equal to alibi:", same, flush=True)

tm = time_interleaved(calls, 9, 0.03)
print("d128 TFLOP/s (spread); fb = fwd+bwd, bwd from fb - fwd")
for key in calls:
  t, spread = tm[key][:2]
  extra = ""
  if key.endswith(" fb"):
    tf = tm[key[:-3] + " fwd"][0]
    extra = f"   bwd {2.5 * flops[key] / 3.5 / (t - tf) / 1e12:7.1f}"
  print(f"{key:28s} {flops[key] / t / 1e12:7.1f} ({spread:.2f}){extra}",
        flush=True)
