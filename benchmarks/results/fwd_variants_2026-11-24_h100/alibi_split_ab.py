"""Run 109 (issue 14): non-causal d128 ALiBi, the forward's key tiles in
three loops by their side of the diagonal (``alibi_split``, today) against
one loop with each tile's side traced, forward and fwd+bwd (the backward
kernels keep their split loops), with no bias beside them; bf16, B x T =
16384, S4k / S16k.  One process, interleaved bursts.

  python3 alibi_split_ab.py
"""
import os, sys
import jax, jax.numpy as jnp
import pallas_flash as pf
from pallas_flash.mosaic import forward
from benchmarks.mosaic_bench import cell_inputs
from benchmarks.timing import time_interleaved

_split = forward.alibi_split


def forward_unsplit(*a, **k):  # None for the forward kernel's own call only
  if sys._getframe(1).f_code.co_filename == forward.__file__:
    return None
  return _split(*a, **k)


calls, flops = {}, {}
for t in (4096, 16384):
  b, n, (q, k, v), f_flops = cell_inputs(128, t, False)
  ct = jax.random.normal(jax.random.key(1), q.shape, jnp.float32)
  slopes = 2.0 ** (-8.0 * jnp.arange(1, n + 1) / n)
  for name, kw, split in (("plain", {}, _split),
                          ("alibi", dict(alibi_slopes=slopes), _split),
                          ("alibi unsplit", dict(alibi_slopes=slopes),
                           forward_unsplit)):
    fwd = lambda q, k, v, kw=kw: pf.flash_attention(
        q, k, v, implementation="mosaic", **kw)
    loss = lambda q, k, v, fwd=fwd: (fwd(q, k, v).astype(jnp.float32) * ct).sum()
    forward.alibi_split = split
    try:
      for mode, f, fl in (("fwd", fwd, f_flops),
                          ("fwd+bwd", jax.grad(loss, (0, 1, 2)), 3.5 * f_flops)):
        calls[(t, name, mode)] = (jax.jit(f).lower(q, k, v).compile(), (q, k, v))
        flops[(t, name, mode)] = fl
    finally:
      forward.alibi_split = _split
tm = time_interleaved(calls, int(os.environ.get("REPS", 11)), 0.04)
print("d128 non-causal, TFLOP/s (spread)")
print(f"{'S':>6s} {'mode':8s} {'plain':>13s} {'alibi':>13s} {'unsplit':>13s} {'alibi/plain':>11s} {'unsplit/plain':>13s}")
for t in (4096, 16384):
  for mode in ("fwd", "fwd+bwd"):
    r = {nm: tm[(t, nm, mode)] for nm in ("plain", "alibi", "alibi unsplit")}
    tf = {nm: flops[(t, nm, mode)] / x[0] / 1e12 for nm, x in r.items()}
    print(f"{t:6d} {mode:8s} " + " ".join(f"{tf[nm]:6.1f} ({r[nm][1]:.2f})" for nm in r)
          + f" {tf['alibi'] / tf['plain']:11.3f} {tf['alibi unsplit'] / tf['plain']:13.3f}", flush=True)
