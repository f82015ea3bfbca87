"""Accuracy of the fp8 forward (issue 49): RMSE of the output against the
float32 reference on the unquantized inputs, FA3's test (Shah et al. 2024,
Sec. 4.3): q, k, v standard normal, and the same with 0.1% of the entries
large (times 10: outlier features).

Rows, each on the same real-valued inputs:

* ``ours bf16``: ``flash_attention`` on the inputs rounded to bf16;
* ``ours fp8``: q, k, v quantized to e4m3 per tensor (descale = amax / 448)
  and ``flash_attention(q8, k8, v8, q_descale=, k_descale=, v_descale=)``;
* ``ours fp8 + Hadamard``: the same after rotating q and k per head by a
  normalised Hadamard matrix (FA3's incoherent processing: q k^T is
  unchanged, outliers are spread over the head dim before quantization);
* ``cudnn fp8``: cuDNN's fp8 attention on the same e4m3 inputs and
  descales, P scaled by 2^8 as ours is (``scale_s``), O in e4m3 with
  scale_o = 448 / amax(v) (|O| <= amax(v)).

  python -m benchmarks.fp8_accuracy [--b 2 --t 4096 --n 16 --h 128]

On a machine without a Hopper GPU the cuDNN row and the kernel are
skipped (the reference path of ours still runs, which checks the script).
"""
from __future__ import annotations

import argparse
import math

import jax
import jax.numpy as jnp

import pallas_flash as pf
from benchmarks import peers

E4M3_MAX = pf.fp8.E4M3_MAX


def inputs(key, b, t, n, h, outliers: bool):
  """Real-valued q, k, v [B, T, N, H] float32: N(0, 1), plus with
  ``outliers`` 0.1% of the entries N(0, 10^2)."""
  keys = jax.random.split(key, 6)
  out = []
  for i in range(3):
    x = jax.random.normal(keys[i], (b, t, n, h), jnp.float32)
    if outliers:
      big = jax.random.bernoulli(keys[3 + i], 1e-3, x.shape)
      x = jnp.where(big, 10.0 * x, x)
    out.append(x)
  return out


quantize = pf.fp8.quantize  # one descale per tensor


def rmse(x, ref):
  return float(jnp.sqrt(jnp.mean((x.astype(jnp.float32) - ref) ** 2)))


def run(args, log=print) -> list[tuple[str, str, float]]:
  hopper = peers.on_gpu() and peers.is_hopper()
  impl = "mosaic" if hopper else "xla"
  rows = []
  for causal in (False, True):
    for outliers in (False, True):
      q, k, v = inputs(jax.random.key(0), args.b, args.t, args.n, args.h,
                       outliers)
      ref = jax.jit(lambda q, k, v: pf.flash_attention(
          q, k, v, is_causal=causal, implementation="xla"))(q, k, v)
      kind = ("causal " if causal else "") + ("outliers" if outliers
                                              else "normal")
      res = {}
      bf = lambda x: x.astype(jnp.bfloat16)
      res["ours bf16"] = pf.flash_attention(bf(q), bf(k), bf(v),
                                            is_causal=causal)

      def ours_fp8(q, k, v):
        (q8, qd), (k8, kd), (v8, vd) = (quantize(x) for x in (q, k, v))
        return pf.flash_attention(q8, k8, v8, is_causal=causal,
                                  implementation=impl, q_descale=qd,
                                  k_descale=kd, v_descale=vd)

      res["ours fp8"] = jax.jit(ours_fp8)(q, k, v)
      rot = pf.fp8.hadamard_rotate
      res["ours fp8 + Hadamard"] = jax.jit(ours_fp8)(rot(q), rot(k), v)
      if hopper:
        (q8, qd), (k8, kd), (v8, vd) = (quantize(x) for x in (q, k, v))
        fn, params = peers.cudnn_fp8(causal, 1.0 / math.sqrt(args.h),
                                     s_scale=256.0)
        o_scale = E4M3_MAX / jnp.max(jnp.abs(v))
        params = peers.cudnn_fp8_scaled(params, qd, kd, vd, o_scale)
        out8 = jax.jit(fn)(q8, k8, v8, params)
        res["cudnn fp8"] = out8.astype(jnp.float32) / o_scale
      for name, out in res.items():
        rows.append((kind, name, rmse(out, ref)))
        log(f"{kind:16s} {name:22s} RMSE {rows[-1][2]:.3e}")
  return rows


def table(rows) -> str:
  kinds = list(dict.fromkeys(k for k, _, _ in rows))
  names = list(dict.fromkeys(n for _, n, _ in rows))
  val = {(k, n): e for k, n, e in rows}
  lines = ["| RMSE vs f32 | " + " | ".join(kinds) + " |",
           "|---|" + "---|" * len(kinds)]
  for n in names:
    lines.append(f"| {n} | " + " | ".join(
        f"{val[(k, n)]:.2e}" if (k, n) in val else "-" for k in kinds) + " |")
  return "\n".join(lines)


def main(argv=None):
  p = argparse.ArgumentParser(prog="python -m benchmarks.fp8_accuracy")
  p.add_argument("--b", type=int, default=None)
  p.add_argument("--t", type=int, default=None)
  p.add_argument("--n", type=int, default=None)
  p.add_argument("--h", type=int, default=128)
  args = p.parse_args(argv)
  small = not peers.on_gpu()  # CPU: the reference path at a tiny size
  args.b = args.b or (1 if small else 2)
  args.t = args.t or (64 if small else 4096)
  args.n = args.n or (2 if small else 16)
  print(f"fp8 accuracy: B{args.b} T=S={args.t} N{args.n} d{args.h}, "
        f"device {jax.devices()[0].device_kind}, jax {jax.__version__}")
  print(table(run(args)))


if __name__ == "__main__":
  main()
