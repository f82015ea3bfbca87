"""The d128 forward's masked steps: per-row spans against the element-wise
compares (forward.query_tile_visible's ``per_row``, forced each way while
tracing), forward only, timed interleaved in one process, outputs bitwise
equal.  Run 120 read the spans 3-6% slower at d128; run 121 read equal code
3% apart."""
import sys, jax, jax.numpy as jnp
from pallas_flash.mosaic import forward as fwd
import pallas_flash as pf
from benchmarks.mosaic_bench import cell_inputs
from benchmarks.timing import time_interleaved

MAIN = fwd.query_tile_visible
for cell in sys.argv[1].split(","):
  h, t, c = cell.split("-"); h = int(h[1:]); t = int(t[:-1]) * 1024
  causal = c == "C"
  b, n, (q, k, v), flops = cell_inputs(h, t, causal)
  calls, outs = {}, {}
  for name, per_row in (("compares", False), ("spans", True),
                        ("compares2", False), ("spans2", True)):
    fwd.query_tile_visible = (  # the kernel's own per_row is overridden
        lambda *a, per_row=None, _forced=per_row, **kw: MAIN(
            *a, per_row=_forced, **kw))
    f = lambda q, k, v: pf.flash_attention(q, k, v, is_causal=causal,
                                           implementation="mosaic")
    cf = jax.jit(f).lower(q, k, v).compile()
    calls[name] = (cf, (q, k, v))
    outs[name] = cf(q, k, v)
  fwd.query_tile_visible = MAIN
  same = bool(jnp.array_equal(outs["compares"], outs["spans"]))
  tm = time_interleaved(calls, 11, 0.03)
  print(f"{cell}: forward TFLOP/s, and / compares (bitwise equal: {same})")
  for name in calls:
    r = flops / tm[name][0] / 1e12
    print(f"  {name:9s} {r:6.1f}   {tm['compares'][0] / tm[name][0]:.3f}",
          flush=True)
