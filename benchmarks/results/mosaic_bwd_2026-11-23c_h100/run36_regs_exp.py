"""Consumer / producer registers (setmaxnreg) of the forward and the two-kernel
backward: (232, 40) as built against (240, 24), with and without dropout,
compiled in one process and timed interleaved.  argv: cells (d128-4k-N,...)"""
import sys
import jax, jax.numpy as jnp
import pallas_flash as pf
from pallas_flash.mosaic import forward as fwd
from benchmarks.mosaic_bench import cell_inputs
from benchmarks.timing import time_interleaved
drop = dict(dropout_rate=0.1, dropout_rng=jax.random.key(7))
for cell in sys.argv[1].split(","):
  h, t, c = cell.split("-"); h = int(h[1:]); t = int(t[:-1]) * 1024; causal = c == "C"
  b, n, (q, k, v), flops = cell_inputs(h, t, causal)
  do = jax.random.normal(jax.random.key(99), q.shape, jnp.bfloat16)
  calls = {}
  for regs in ((232, 40), (240, 24)):
    fwd._REGISTERS[2] = regs
    for dname, kw in (("", {}), (" drop", drop)):
      name = f"{regs[0]}/{regs[1]}{dname}"
      f = lambda q, k, v, kw=kw: pf.flash_attention(q, k, v, is_causal=causal, implementation="mosaic", **kw)
      def fb(q, k, v, do, f=f):
        _, vjp = jax.vjp(f, q, k, v)
        return vjp(do)
      print(f"==== compile {cell} {name}", file=sys.stderr, flush=True)
      jf, jfb = jax.jit(f), jax.jit(fb)
      jax.block_until_ready(jf(q, k, v)); jax.block_until_ready(jfb(q, k, v, do))
      calls[name] = (jf, (q, k, v)); calls[name + " fb"] = (jfb, (q, k, v, do))
  fwd._REGISTERS[2] = (232, 40)
  times = time_interleaved(calls, 5, 0.03)
  for name in [x for x in calls if not x.endswith(" fb")]:
    tf, tfb = times[name][0], times[name + " fb"][0]
    print(f"{cell:11s} {name:14s} fwd {flops/tf/1e12:6.1f}  bwd {2.5*flops/(tfb-tf)/1e12:6.1f}  fwd+bwd {3.5*flops/tfb/1e12:6.1f} TFLOP/s", flush=True)
