"""The dropout backward with dS^T from the kept Z P^T (``backward.DS_FROM_KEPT``:
a multiply and a multiply-add per score in the dK/dV kernel) against the
select on dP^T - delta' (``False``), in one process: each form's fwd+bwd
compiled twice as separate executables and timed interleaved with the
forward (``timing.interleaved_samples``); gradients compared with the old
form's (relative L2).  Backward TFLOP/s = 2.5 F / (fwd+bwd - forward).

  python3 kept_ab.py d128-16k-C,d128-4k-N
"""
import sys

import jax
import jax.numpy as jnp
import numpy as np

import pallas_flash as pf
from benchmarks.mosaic_bench import cell_inputs
from benchmarks.timing import interleaved_samples, paired_ratio
from pallas_flash.mosaic import backward

RATE = 0.1
rng = jax.random.key(7)
for cell in sys.argv[1].split(","):
  h, t, c = cell.split("-")
  h, t, causal = int(h[1:]), int(t[:-1]) * 1024, c == "C"
  b, n, (q, k, v), flops = cell_inputs(h, t, causal)
  do = jax.random.normal(jax.random.key(99), q.shape, jnp.bfloat16)
  attn = lambda q, k, v: pf.flash_attention(
      q, k, v, is_causal=causal, implementation="mosaic", dropout_rate=RATE,
      dropout_rng=rng)

  def make_fb():  # a fresh function per compile: jit's trace cache is
    def fb(q, k, v, do):  # keyed on the function, and the switch is read
      _, vjp = jax.vjp(attn, q, k, v)  # when tracing (run 154 reused one
      return vjp(do)  # trace for both forms)
    return fb

  calls = {"fwd": (jax.jit(attn).lower(q, k, v).compile(), (q, k, v))}
  grads = {}
  for form, on in (("old", False), ("kept", True)):
    backward.DS_FROM_KEPT = on  # read when the kernel is traced
    for rep in "ab":
      cf = jax.jit(make_fb()).lower(q, k, v, do).compile()
      calls[f"{form} {rep}"] = (cf, (q, k, v, do))
      grads[form] = cf(q, k, v, do)
  backward.DS_FROM_KEPT = True
  rel = [float(jnp.linalg.norm((a.astype(jnp.float32) - o.astype(jnp.float32)).ravel())
               / jnp.linalg.norm(o.astype(jnp.float32).ravel()))
         for a, o in zip(grads["kept"], grads["old"])]
  samples, _ = interleaved_samples(calls, 15, 0.03)
  med = {name: float(np.median(xs)) for name, xs in samples.items()}
  bwd = lambda name: 2.5 * flops / (med[name] - med["fwd"]) / 1e12
  q25, q50, q75 = paired_ratio(samples["old a"], samples["kept a"])
  print(f"{cell} (dropout {RATE}): backward TFLOP/s old {bwd('old a'):.1f} "
        f"{bwd('old b'):.1f}, kept {bwd('kept a'):.1f} {bwd('kept b'):.1f}; "
        f"fwd+bwd paired ratio old / kept {q50:.3f} [{q25:.3f}, {q75:.3f}]; "
        "rel L2 of dq, dk, dv against old " + " ".join(f"{x:.1e}" for x in rel),
        flush=True)
