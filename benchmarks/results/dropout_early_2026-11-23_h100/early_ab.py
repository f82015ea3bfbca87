"""Run 67: the dropout forward's keep bits computed while the S GEMM runs
(``forward.EARLY_KEEP``: int16 all-ones words, one AND per pair of bf16 P
entries after the softmax) against computing them after it (multiply-add,
compare and select per entry on the softmax's chain).  d128, dropout 0.1,
forward and fwd+bwd, with no dropout's default as the base; outputs of the
two forms compared bit for bit.  One process per call, interleaved bursts."""
import sys, jax, jax.numpy as jnp
import pallas_flash as pf
from pallas_flash.mosaic import forward as fwd
from benchmarks.mosaic_bench import cell_inputs
from benchmarks.timing import time_interleaved

for cell in sys.argv[1].split(","):
  h, t, c = cell.split("-"); h = int(h[1:]); t = int(t[:-1]) * 1024; causal = c == "C"
  b, n, (q, k, v), flops = cell_inputs(h, t, causal)
  ct = jax.random.normal(jax.random.key(3), q.shape, q.dtype)
  calls, outs = {}, {}
  for name, rate, early in (("no dropout", 0.0, True), ("dropout late", 0.1, False),
                            ("dropout early", 0.1, True)):
    fwd.EARLY_KEEP = early
    kw = dict(dropout_rate=rate, dropout_rng=jax.random.key(7)) if rate else {}
    f = lambda q, k, v, kw=kw: pf.flash_attention(q, k, v, is_causal=causal,
                                                  implementation="mosaic", **kw)
    g = jax.grad(lambda q, k, v, f=f: jnp.vdot(f(q, k, v).astype(jnp.float32),
                                               ct.astype(jnp.float32)), argnums=(0, 1, 2))
    try:
      cf = jax.jit(f).lower(q, k, v).compile()
      cg = jax.jit(g).lower(q, k, v).compile()
    except Exception as e:
      print(cell, name, "failed", type(e).__name__, str(e)[:400], flush=True)
      continue
    calls[name + " fwd"] = (cf, (q, k, v))
    calls[name + " fwd+bwd"] = (cg, (q, k, v))
    outs[name] = cf(q, k, v)
  if "dropout late" in outs and "dropout early" in outs:
    same = bool(jnp.array_equal(outs["dropout late"], outs["dropout early"]))
    print(f"{cell}: early / late forward outputs bitwise equal: {same}", flush=True)
  tm = time_interleaved(calls, 7, 0.03)
  print(f"{cell}: TFLOP/s (spread), ratio to no dropout", flush=True)
  for kind, mult in (("fwd", 1.0), ("fwd+bwd", 3.5)):
    base = tm.get("no dropout " + kind, (float("nan"),))[0]
    for name in ("no dropout", "dropout late", "dropout early"):
      key = f"{name} {kind}"
      if key in tm:
        print(f"  {key:22s} {mult * flops / tm[key][0] / 1e12:6.1f} ({tm[key][1]:.2f})"
              f"  {base / tm[key][0]:.3f}", flush=True)
