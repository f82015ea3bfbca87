"""Run 87: how the d128 two-kernel backward's time splits between its dK/dV
kernel and its dQ kernel.  The whole backward (``mosaic.backward.backward``
under jit, on the forward's residuals) is timed against the same call with
the dQ kernel's launch replaced by zeros, in one process, interleaved
(``benchmarks.timing``); the dQ kernel's time is the difference.  Each
kernel's rate is given in TFLOP/s of the GEMM work it does (dK/dV: S^T,
dP^T, dV, dK; dQ: S, dP, dQ; 2 T S H FLOPs each, halved when causal),
and the backward's in the convention (2.5 x the forward's 4 T S H).

  python3 kernel_split.py [--dropout 0.1]
"""
import argparse
import dataclasses

import jax
import jax.numpy as jnp

from benchmarks.timing import time_interleaved
from pallas_flash import masks, params as params_lib
from pallas_flash.mosaic import backward as mb, forward as mf
from pallas_flash.mosaic.config import MosaicBackwardConfig, MosaicConfig

ap = argparse.ArgumentParser()
ap.add_argument("--dropout", type=float, default=0.0)
ap.add_argument("--cells", default="4k-N,4k-C,16k-N,16k-C")
ap.add_argument("--tokens", type=int, default=16384)  # B x T
ap.add_argument("--heads", type=int, default=16)
ap.add_argument("--interpret", action="store_true")  # a CPU check
args = ap.parse_args()
H, N = 128, args.heads
real_launch = mb._launch


def no_dq_launch(kernel, name, operands, out_type, *a, **kw):
  if name == "pallas_flash_mosaic_dq":
    return jnp.zeros(out_type.shape, out_type.dtype)
  return real_launch(kernel, name, operands, out_type, *a, **kw)


rows = []
for cell in args.cells.split(","):
  t = int(float(cell.split("k")[0]) * 1024)
  causal = cell.endswith("C")
  b = max(1, args.tokens // t)
  ks = jax.random.split(jax.random.key(0), 4)
  q, k, v, do = (jax.random.normal(x, (b, t, N, H), jnp.bfloat16) for x in ks)
  lens = jnp.full((b,), t, jnp.int32)
  arrays = masks.MaskArrays(lens, lens)
  if args.dropout:
    arrays = arrays._replace(dropout_seeds=jnp.arange(b * 4, dtype=jnp.int32
                                                      ).reshape(b, 4))
  spec = masks.MaskSpec(is_causal=causal)
  calls = {}
  for regs in (0, 1):
    cfg = dataclasses.replace(
        MosaicConfig.default(H, causal, kv_seqlen=t, dropout=args.dropout > 0),
        backward=dataclasses.replace(MosaicBackwardConfig.default(
            H, causal, args.dropout > 0), dq_rows_in_registers=regs))
    p = params_lib.KernelParams(spec=spec, scale=H ** -0.5, forward="mosaic",
                                config=cfg, dropout_rate=args.dropout,
                                interpret=args.interpret)
    out, lse = jax.jit(lambda q, k, v: mf.forward(q, k, v, arrays, p))(q, k, v)
    f = jax.jit(lambda q, k, v, o, l, d, p=p: mb.backward(
        q, k, v, arrays, o, l, d, p))
    jax.block_until_ready(f(q, k, v, out, lse, do))  # compiled unpatched
    calls[f"whole regs={regs}"] = (f, (q, k, v, out, lse, do))
  mb._launch = no_dq_launch
  try:
    g = jax.jit(lambda q, k, v, o, l, d, p=p: mb.backward(
        q, k, v, arrays, o, l, d, p))
    jax.block_until_ready(g(q, k, v, out, lse, do))  # traced patched
    calls["dK/dV only"] = (g, (q, k, v, out, lse, do))
  finally:
    mb._launch = real_launch
  res = time_interleaved(calls, 7, 0.05)
  flop = 2 * b * N * t * t * H * (0.5 if causal else 1.0)  # one GEMM unit
  kv_s = res["dK/dV only"][0]
  for regs in (0, 1):
    whole = res[f"whole regs={regs}"][0]
    dq_s = whole - kv_s
    rows.append((cell, regs, whole * 1e3, kv_s * 1e3, dq_s * 1e3,
                 2.5 * 2 * flop / whole / 1e12, 4 * flop / kv_s / 1e12,
                 3 * flop / dq_s / 1e12))
    print(rows[-1], flush=True)

print(f"\nd128, {N} heads, B x T = {args.tokens}, dropout {args.dropout}; ms and "
      "TFLOP/s (bwd: convention; kernels: their own GEMM work)")
print("| cell | dq_rows_in_registers | bwd ms | dK/dV ms | dQ ms | bwd TF/s "
      "| dK/dV GEMM TF/s | dQ GEMM TF/s |")
print("|---|---|---|---|---|---|---|---|")
for r in rows:
  print("| %s | %d | %.3f | %.3f | %.3f | %.0f | %.0f | %.0f |" % r)
