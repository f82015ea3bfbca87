"""How the Mosaic two-kernel backward's time splits between its dK/dV kernel
and its dQ kernel (first run as run 87, 2026-11-24).

The whole backward (``mosaic.backward.backward`` under jit, on the forward's
residuals) is timed against the same call with the dQ kernel's launch
replaced by zeros, in one process, interleaved (``benchmarks.timing``); the
dQ kernel's time is the difference.  Each kernel's rate is in TFLOP/s of the
GEMM work it does (dK/dV: S^T, dP^T, dV, dK; dQ: S, dP, dQ; 2 T S H FLOPs
per head each, halved when causal), the backward's in the convention (2.5 x
the forward's 4 T S H, which for a five-GEMM step is its GEMM rate).  Both
dq_rows_in_registers settings are timed.

  PYTHONPATH=$PWD python3 tools/bwd_split.py [--cells 4k-N,16k-C]
      [--dropout 0.1] [--head-dim 128] [--tokens 16384] [--heads 16]

Prints a markdown table last.  ``--interpret`` runs it on a CPU (tests).
"""
from __future__ import annotations

import argparse
import dataclasses

import jax
import jax.numpy as jnp

from benchmarks.mosaic_bench import full_arrays
from benchmarks.timing import time_interleaved
from pallas_flash import masks, params as params_lib
from pallas_flash.mosaic import backward as mb, forward as mf
from pallas_flash.mosaic.config import MosaicBackwardConfig, MosaicConfig


def _without_dq(real_launch):
  """A ``backward._launch`` that returns zeros for the dQ kernel."""
  def launch(kernel, name, operands, out_type, *a, **kw):
    if name == "pallas_flash_mosaic_dq":  # dQ (and dbias, with a bias)
      return jax.tree.map(lambda t: jnp.zeros(t.shape, t.dtype), out_type)
    return real_launch(kernel, name, operands, out_type, *a, **kw)
  return launch


def split(cells, *, head_dim=128, heads=16, tokens=16384, dropout=0.0,
          interpret=False, reps=7, sample_s=0.05):
  """Rows (cell, dq_rows_in_registers, bwd ms, dK/dV ms, dQ ms, bwd TF/s,
  dK/dV GEMM TF/s, dQ GEMM TF/s) for cells like "4k-N" / "16k-C"."""
  rows = []
  for cell in cells:
    t = int(float(cell.split("k")[0]) * 1024)
    causal = cell.endswith("C")
    b = max(1, tokens // t)
    ks = jax.random.split(jax.random.key(0), 4)
    q, k, v, do = (jax.random.normal(x, (b, t, heads, head_dim), jnp.bfloat16)
                   for x in ks)
    arrays = full_arrays(b, t, t)
    if dropout:
      arrays = arrays._replace(dropout_seeds=jnp.arange(
          b * 4, dtype=jnp.int32).reshape(b, 4))
    spec = masks.MaskSpec(is_causal=causal)
    fwd_cfg = MosaicConfig.default(head_dim, causal, kv_seqlen=t,
                                   dropout=dropout > 0)

    def params(regs):
      bwd_cfg = dataclasses.replace(MosaicBackwardConfig.default(
          head_dim, causal, dropout > 0), dq_rows_in_registers=regs)
      return params_lib.KernelParams(
          spec=spec, scale=head_dim ** -0.5, forward="mosaic",
          config=dataclasses.replace(fwd_cfg, backward=bwd_cfg),
          dropout_rate=dropout, interpret=interpret)

    def backward(regs):  # jitted, traced (the launch is looked up then)
      p = params(regs)
      f = jax.jit(lambda q, k, v, o, l, d: mb.backward(
          q, k, v, arrays, o, l, d, p))
      jax.block_until_ready(f(*args))
      return f, args

    # The residuals once: the forward does not depend on the backward config.
    out, lse = jax.jit(lambda q, k, v: mf.forward(q, k, v, arrays, params(0))
                       )(q, k, v)
    args = (q, k, v, out, lse, do)
    calls = {f"whole regs={regs}": backward(regs) for regs in (0, 1)}
    real_launch = mb._launch
    mb._launch = _without_dq(real_launch)
    try:
      calls["dK/dV only"] = backward(1)
    finally:
      mb._launch = real_launch
    res = time_interleaved(calls, reps, sample_s)
    unit = 2 * b * heads * t * t * head_dim * (0.5 if causal else 1.0)
    kv_s = res["dK/dV only"][0]
    for regs in (0, 1):
      whole = res[f"whole regs={regs}"][0]
      dq_s = whole - kv_s
      rows.append((cell, regs, whole * 1e3, kv_s * 1e3, dq_s * 1e3,
                   5 * unit / whole / 1e12, 4 * unit / kv_s / 1e12,
                   3 * unit / dq_s / 1e12 if dq_s > 0 else float("nan")))
      print(rows[-1], flush=True)
  return rows


def main(argv=None):
  ap = argparse.ArgumentParser()
  ap.add_argument("--cells", default="4k-N,4k-C,16k-N,16k-C")
  ap.add_argument("--dropout", type=float, default=0.0)
  ap.add_argument("--head-dim", type=int, default=128)
  ap.add_argument("--tokens", type=int, default=16384)  # B x T
  ap.add_argument("--heads", type=int, default=16)
  ap.add_argument("--interpret", action="store_true")  # a CPU check
  args = ap.parse_args(argv)
  rows = split(args.cells.split(","), head_dim=args.head_dim,
               heads=args.heads, tokens=args.tokens, dropout=args.dropout,
               interpret=args.interpret)
  print(f"\nd{args.head_dim}, {args.heads} heads, B x T = {args.tokens}, "
        f"dropout {args.dropout}; ms and TFLOP/s (bwd: convention; "
        "kernels: their own GEMM work)")
  print("| cell | dq_rows_in_registers | bwd ms | dK/dV ms | dQ ms | bwd TF/s "
        "| dK/dV GEMM TF/s | dQ GEMM TF/s |")
  print("|---|---|---|---|---|---|---|---|")
  for r in rows:
    print("| %s | %d | %.3f | %.3f | %.3f | %.0f | %.0f | %.0f |" % r)


if __name__ == "__main__":
  main()
