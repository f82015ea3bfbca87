"""Run 131 (issue 14): the d128 ALiBi forward on three consumers with 64-key
tiles, bf16, B x T = 16384, 16 heads, one process, interleaved bursts.

Runs 105-112 put ALiBi's three-consumer forward at half speed with 128-key
tiles: ptxas serializes its wgmmas (C7512), S and O taking 128 of a
consumer's 160 registers.  A 64-key tile halves S (32 registers) and ALiBi's
per-key terms.  Rows: the no-bias default, the ALiBi default (two consumers,
persistent, softmax overlap), and ALiBi on three consumers (not persistent,
no overlap) with 64-key tiles and 2 / 3 / 4 stages, plus fwd+bwd for the
default and the best-guess variant so the ratio to no bias can be read.

  python3 alibi_ab.py time
  python3 alibi_ab.py compile NAME     # one row compiled once (ptxas report)
"""
import dataclasses, sys, os
import jax, jax.numpy as jnp
import pallas_flash as pf
from pallas_flash.mosaic.config import MosaicConfig
from benchmarks.mosaic_bench import cell_inputs
from benchmarks.timing import time_interleaved


def build(t, causal, alibi, variant, fb):
  b, n, (q, k, v), flops = cell_inputs(128, t, causal)
  kw = {}
  if alibi:
    kw["alibi_slopes"] = 2.0 ** (-8.0 * jnp.arange(1, n + 1) / n)
  cfg = None
  if variant:
    cfg = dataclasses.replace(
        MosaicConfig.default(128, causal, kv_seqlen=t, alibi=alibi),
        persistent=False, overlap_softmax=False, **variant)
  f = lambda q, k, v: pf.flash_attention(q, k, v, is_causal=causal,
                                         implementation="mosaic", config=cfg,
                                         **kw)
  args = (q, k, v)
  if fb:
    do = jax.random.normal(jax.random.key(99), q.shape, jnp.bfloat16)
    g = lambda q, k, v, do: jax.vjp(f, q, k, v)[1](do)
    compiled = jax.jit(g).lower(q, k, v, do).compile()
    args, flops = (q, k, v, do), 3.5 * flops
  else:
    compiled = jax.jit(f).lower(q, k, v).compile()
  jax.block_until_ready(compiled(*args))
  return compiled, args, flops


C3 = lambda bkv, st: dict(consumers=3, block_kv=bkv, num_stages=st)
ROWS = {}  # name: (t, causal, alibi, variant, fwd+bwd)
for t in (16384, 4096):
  cell = f"S{t // 1024}kN"
  ROWS[f"{cell} plain default"] = (t, False, False, None, False)
  ROWS[f"{cell} alibi default"] = (t, False, True, None, False)
  for st in (2, 3, 4):
    ROWS[f"{cell} alibi 3c kv64 st{st}"] = (t, False, True, C3(64, st), False)
  ROWS[f"{cell} alibi 2c kv64 st3"] = (t, False, True,
                                      dict(block_kv=64, num_stages=3), False)
  ROWS[f"{cell} plain default fb"] = (t, False, False, None, True)
  ROWS[f"{cell} alibi default fb"] = (t, False, True, None, True)
  ROWS[f"{cell} alibi 3c kv64 st3 fb"] = (t, False, True, C3(64, 3), True)

if sys.argv[1] == "compile":
  build(*ROWS[sys.argv[2]])
  print("compiled", sys.argv[2], flush=True)
else:
  calls, flops = {}, {}
  for name, row in ROWS.items():
    try:
      f, args, flops[name] = build(*row)
      calls[name] = (f, args)
    except Exception as e:  # a variant that does not lower or compile
      print(f"{name}: {type(e).__name__}: {str(e)[:300]}", flush=True)
  tm = time_interleaved(calls, int(os.environ.get("REPS", 7)), 0.03)
  print("d128 TFLOP/s, forward or fwd+bwd (fb) (spread)")
  for name in calls:
    t, spread = tm[name][:2]
    print(f"{name:28s} {flops[name] / t / 1e12:7.1f} ({spread:.2f})",
          flush=True)
