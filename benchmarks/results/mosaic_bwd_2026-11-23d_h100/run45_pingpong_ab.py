"""Branch h7-bwd-pingpong: the Mosaic backward without / with ping-pong
turns in the two-kernel form (backward.PINGPONG), and with every bf16 tile
in the 32-byte swizzle (backward._TILED; what FA3's 80-row query steps would
need in Mosaic GPU), all at trace time, cuDNN in the same process.
Interleaved bursts (benchmarks.timing.time_interleaved); backward =
fwd+bwd - fwd, 2.5x the forward's FLOPs.

  PYTHONPATH=$PWD python3 benchmarks/results/mosaic_bwd_pingpong_next/pingpong_ab.py d128-4k-N,...
"""
import sys

import jax
import jax.numpy as jnp

import pallas_flash as pf
from benchmarks.mosaic_bench import cell_inputs
from benchmarks.timing import time_interleaved
from pallas_flash.mosaic import backward as bwd
import jax.experimental.pallas.mosaic_gpu as plgpu

TILED = bwd._TILED
SWIZZLE32 = (plgpu.TilingTransform((8, 16)), plgpu.SwizzleTransform(32))

for cell in sys.argv[1].split(","):
  h, t, c = cell.split("-")
  h, t, causal = int(h[1:]), int(t[:-1]) * 1024, c == "C"
  b, n, (q, k, v), flops = cell_inputs(h, t, causal)
  do = jax.random.normal(jax.random.key(99), q.shape, jnp.bfloat16)
  # A new function per variant: jit's trace caches are keyed on the
  # function, so a shared one would reuse the first variant's kernels.
  ours = lambda: (lambda q, k, v: pf.flash_attention(
      q, k, v, is_causal=causal, implementation="mosaic"))
  # name: ((PINGPONG, _TILED), f)
  impls = {
      "turns off": ((False, TILED), ours()),
      "turns on": ((True, TILED), ours()),
      "swizzle 32": ((False, SWIZZLE32), ours()),
      "cudnn": ((False, TILED), lambda q, k, v: jax.nn.dot_product_attention(
          q, k, v, is_causal=causal, implementation="cudnn")),
  }
  calls, grads = {}, {}
  for name, ((flag, tiled), f) in impls.items():
    bwd.PINGPONG, bwd._TILED = flag, tiled
    def g(q, k, v, do, f=f):
      _, vjp = jax.vjp(f, q, k, v)
      return vjp(do)
    cf = jax.jit(f).lower(q, k, v).compile()
    cg = jax.jit(g).lower(q, k, v, do).compile()
    grads[name] = cg(q, k, v, do)
    calls[name], calls[name + " fb"] = (cf, (q, k, v)), (cg, (q, k, v, do))
  bwd.PINGPONG, bwd._TILED = False, TILED
  err = {name: max(float(jnp.linalg.norm((a - r).astype(jnp.float32))
                         / jnp.linalg.norm(r.astype(jnp.float32)))
                   for a, r in zip(gs, grads["cudnn"]))
         for name, gs in grads.items()}
  same = all(bool(jnp.array_equal(a, r)) for name in ("turns on", "swizzle 32")
             for a, r in zip(grads[name], grads["turns off"]))
  tm = time_interleaved(calls, 7, 0.04)
  print(f"{cell} (B{b} x N{n}): bwd / fwd+bwd TFLOP/s; grads of turns on and swizzle 32 "
        f"== turns off bitwise: {same}")
  for name in impls:
    fs, fbs = tm[name][0], tm[name + " fb"][0]
    print(f"  {name:10s} bwd {2.5 * flops / (fbs - fs) / 1e12:6.1f}  fwd+bwd "
          f"{3.5 * flops / fbs / 1e12:6.1f}  grad err vs cuDNN {err[name]:.1e}",
          flush=True)
