"""One implementation on one cell, called 3 times after inputs exist (for ncu)."""
import sys
import jax
from benchmarks import mosaic_bench as mb
from benchmarks import sustained as su
h, t, causal, impl = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "C", sys.argv[4]
b, _, (q, k, v), flops = mb.cell_inputs(h, t, causal)
f = su.calls(h, t, causal, b, [])[impl]
jax.block_until_ready((q, k, v))
for _ in range(3):
  jax.block_until_ready(f(q, k, v))
print("FLOPs", flops, file=sys.stderr)
