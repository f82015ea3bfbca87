"""One fwd+bwd call of one implementation on one cell (for ncu): ours
(the Mosaic default), cuDNN, or ours with a backward config variant
(``ours[deterministic=False]``), compiled and run once."""
import sys

import jax
import jax.numpy as jnp

from benchmarks import bwd_bench, mosaic_bench

h, t, causal, impl = (int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "C",
                      sys.argv[4])
b, n, (q, k, v), flops = mosaic_bench.cell_inputs(h, t, causal)
do = jax.random.normal(jax.random.key(99), q.shape, jnp.bfloat16)
variants = []
if impl.startswith("ours["):
  variants = [mosaic_bench.parse_variant(impl[5:-1])]
f = bwd_bench.cell_impls(h, t, causal, variants, n, False)[impl]
fb = bwd_bench.fwd_bwd(f)
for _ in range(1):
  jax.block_until_ready(fb(q, k, v, do))
print("forward FLOPs", flops, file=sys.stderr)
