"""Run 175: row_ring=True against row_ring=False on two small gradient cases (check_gradients against the f32
reference; the two forms bitwise equal): the fused d64 kernel and the two-kernel d64 form with dropout."""
import sys, time, numpy as np
sys.path.insert(0, "tests")
from jax.experimental.pallas import mosaic_gpu as plgpu
import test_mosaic as tm
from pallas_flash.mosaic.config import MosaicBackwardConfig as BC
cases = [
  ("fused", dict(n=4, k=2, t=150, s=200, causal=True, bottom_right=True, q_lengths=(150,), kv_lengths=(190,)),
   dict(block_q_dkv=128, block_kv_dq=128, fused=True)),
  ("two-kernel dropout", dict(n=2, k=1, t=130, s=140, causal=True, dropout=0.1),
   dict(block_q_dkv=64, block_kv_dq=128)),
]
for name, kw, ckw in cases:
  outs = []
  for ring in (False, True):
    t0 = time.time()
    c = tm.B(name + (" ring" if ring else ""), config=BC(**ckw, row_ring=ring), **kw)
    outs.append(tm.check_gradients(c, "mosaic", seed=3))
    print(name, ring, "ok", round(time.time() - t0, 1), "s", flush=True)
  for a, b in zip(*outs):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  print(name, "bitwise equal")
