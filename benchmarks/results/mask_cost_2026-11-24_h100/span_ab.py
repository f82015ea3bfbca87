"""The masked steps' mask as per-row spans (forward.tile_visible's
``per_row``, one unsigned compare per element) against the three
element-wise compares of main before (``old``, kept here), timed interleaved
in one process; outputs and gradients must be bitwise equal.  Run 120 timed
per-row spans everywhere; since, the d128 forward keeps the compares
(``per_row=head_dim <= 64``), so there both variants run the same forward."""
import sys, jax, jax.numpy as jnp
from jax import lax
import jax.experimental.pallas.mosaic_gpu as plgpu
from pallas_flash import masks
from pallas_flash.mosaic import forward as fwd
import pallas_flash as pf
from benchmarks.mosaic_bench import cell_inputs
from benchmarks.timing import time_interleaved

NEW = fwd.tile_visible


def old_position_visible(spec, q_pos, k_pos, q_len, kv_len, offset):
  ok = (q_pos < q_len) & (k_pos < kv_len)
  if spec.is_causal:
    ok &= k_pos <= q_pos + offset
  if spec.window is not None:
    left, right = spec.window
    ok &= (k_pos >= q_pos + offset - left) & (k_pos <= q_pos + offset + right)
  return ok


def old(spec, item, row_start, col_start, shape, kv_major, segments=None,
        dense=None, per_row=True):
  """The full-tile positions and compares of main before run 120."""
  iota = lambda d: plgpu.broadcasted_iota(jnp.int32, shape, d,
                                          layout=fwd._WGMMA)
  rows, cols = row_start + iota(0), col_start + iota(1)
  q_pos, k_pos = (cols, rows) if kv_major else (rows, cols)
  ok = old_position_visible(spec, q_pos, k_pos, item.q_len, item.kv_len,
                            item.offset)
  if segments is not None:
    ok = ok & masks.segment_visible(*segments())
  if dense is not None:
    ok = ok & (plgpu.load(dense(), layout=fwd._WGMMA, optimized=False) != 0)
  return ok


VARIANTS = {"old": old, "spans": NEW}
for cell in sys.argv[1].split(","):
  h, t, c = cell.split("-"); h = int(h[1:]); t = int(t[:-1]) * 1024
  causal = c == "C"
  b, n, (q, k, v), flops = cell_inputs(h, t, causal)
  do = jax.random.normal(jax.random.key(99), q.shape, jnp.bfloat16)

  def mk():  # fresh functions per variant: jit's caches must not share
    f = lambda q, k, v: pf.flash_attention(q, k, v, is_causal=causal,
                                           implementation="mosaic")
    def g(q, k, v, do):
      o, vjp = jax.vjp(f, q, k, v)
      return o, *vjp(do)
    return f, g
  calls, outs = {}, {}
  for name, fn in VARIANTS.items():
    fwd.tile_visible = fn
    f, g = mk()
    cf = jax.jit(f).lower(q, k, v).compile()
    cg = jax.jit(g).lower(q, k, v, do).compile()
    calls[name] = (cf, (q, k, v)); calls[name + " fb"] = (cg, (q, k, v, do))
    outs[name] = cg(q, k, v, do)
  fwd.tile_visible = NEW
  same = all(bool(jnp.array_equal(a, b_)) for a, b_ in
             zip(outs["old"], outs["spans"]))
  tm = time_interleaved(calls, 9, 0.03)
  print(f"{cell}: fwd / fwd+bwd / bwd TFLOP/s, and / old "
        f"(out, dq, dk, dv bitwise equal: {same})")
  base = None
  for name in VARIANTS:
    fs, fbs = tm[name][0], tm[name + " fb"][0]
    r = (flops / fs / 1e12, 3.5 * flops / fbs / 1e12,
         2.5 * flops / (fbs - fs) / 1e12)
    base = base or r
    print(f"  {name:6s} {r[0]:6.1f} {r[1]:6.1f} {r[2]:6.1f}   "
          f"{r[0]/base[0]:.3f} {r[1]/base[1]:.3f} {r[2]/base[2]:.3f}",
          flush=True)
