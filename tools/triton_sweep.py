"""Block-size sweep of the Pallas-Triton kernels against JAX's own Pallas-Triton
``mha`` on the FlashAttention benchmark workload (bf16, batch*seqlen = 16384,
hidden 2048).  Backs the defaults in ``pallas_flash/triton/config.py``.

    python -m tools.triton_sweep [--quick] [--cells-only] [--json OUT.json]

Prints one table: TFLOP/s (fwd: 4*B*N*S^2*H, x0.5 causal; bwd: 2.5x that over
the fwd+bwd minus fwd time) per config and the ratio to ``mha`` measured in
the same process on the same inputs.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import warnings

import jax
import jax.numpy as jnp

import pallas_flash as pf
from benchmarks.timing import time_calls
from pallas_flash import TritonConfig


def bench(fn, *args):
  """Median seconds per call (bursts of back-to-back calls; see benchmarks.timing)."""
  jax.block_until_ready(fn(*args))  # compile + warm up
  return time_calls(fn, args, reps=7, sample_s=0.025)[0]


def fwd_bwd_fns(attn):
  fwd = jax.jit(attn)

  def loss(q, k, v, do):
    return jnp.sum(attn(q, k, v).astype(jnp.float32) * do)

  fwdbwd = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
  return fwd, fwdbwd


def measure(attn, q, k, v, do, flops):
  fwd, fwdbwd = fwd_bwd_fns(attn)
  t_f = bench(fwd, q, k, v)
  t_fb = bench(fwdbwd, q, k, v, do)
  return flops / t_f / 1e12, 2.5 * flops / max(t_fb - t_f, 1e-9) / 1e12


FWD_CANDIDATES = {  # (block_q, block_k, num_warps, num_stages)
    64: [(64, 64, 4, 3), (64, 64, 4, 4), (64, 128, 4, 3), (128, 64, 4, 3), (64, 32, 4, 3)],
    128: [(128, 64, 4, 3), (128, 64, 8, 3), (128, 128, 8, 2), (128, 64, 8, 2), (128, 32, 4, 3)],
}
BWD_CANDIDATES = [  # (block_q_dkv, block_k_dkv, block_q_dq, block_k_dq, num_warps_bwd, num_stages_bwd)
    (64, 64, 64, 64, 4, 2), (64, 128, 128, 64, 8, 2), (32, 64, 64, 32, 4, 2),
]


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--quick", action="store_true")
  ap.add_argument("--json")
  ap.add_argument("--cells-only", action="store_true",
                  help="skip the sweep; time the workload cells at the defaults")
  args = ap.parse_args()
  warnings.filterwarnings("ignore", category=DeprecationWarning)
  from jax.experimental.pallas.ops.gpu import attention as jax_mha

  rows = []
  dev = jax.devices()[0].device_kind
  print(f"# {datetime.date.today()} {dev} jax {jax.__version__}", flush=True)
  for d in (64, 128):
    # --- sweep at S=4096 (both causal flags), pick the best config per d ---
    s_len = 4096
    b, n = 16384 // s_len, 2048 // d
    key = jax.random.key(0)
    kq, kk, kv, kd = jax.random.split(key, 4)
    shape = (b, s_len, n, d)
    q, k, v = (jax.random.normal(x, shape, jnp.bfloat16) for x in (kq, kk, kv))
    do = jax.random.normal(kd, shape, jnp.float32)

    base = TritonConfig.default(d)

    def run_cfg(cfg, with_bwd):
      tot = [0.0, 0.0]
      for causal in (False, True):
        flops = 4 * b * n * s_len * s_len * d * (0.5 if causal else 1.0)
        attn = lambda q, k, v: pf.flash_attention(
            q, k, v, is_causal=causal, implementation="triton", config=cfg)
        try:
          if with_bwd:
            f, bw = measure(attn, q, k, v, do, flops)
          else:
            f, bw = flops / bench(jax.jit(attn), q, k, v) / 1e12, 0.0
        except Exception as e:  # a config may not fit in shared memory
          print(f"  failed: {type(e).__name__}: {str(e)[:200]}")
          f = bw = 0.0
        tot[0] += f / 2
        tot[1] += bw / 2
      return tot

    # Forward sweep (bwd at its default), then backward sweep at the best fwd.
    fwd_scores = {}
    for fc in [] if args.cells_only else FWD_CANDIDATES[d][: 2 if args.quick else None]:
      cfg = dataclasses.replace(base, block_q=fc[0], block_k=fc[1], num_warps=fc[2], num_stages=fc[3])
      fwd_scores[fc] = run_cfg(cfg, False)[0]
      rows.append(dict(kind="sweep_fwd", d=d, S=s_len, cfg=fc, fwd_mean_nc=fwd_scores[fc]))
      print(f"d{d} S{s_len} fwd (block_q, block_k, warps, stages)={fc}: {fwd_scores[fc]:.0f} TFLOP/s (mean of N, C)", flush=True)
    best_f = max(fwd_scores, key=fwd_scores.get) if fwd_scores else None
    bwd_scores = {}
    for bc in [] if args.cells_only else BWD_CANDIDATES[: 2 if args.quick else None]:
      cfg = dataclasses.replace(base, block_q=best_f[0], block_k=best_f[1], num_warps=best_f[2],
                                num_stages=best_f[3], block_q_dkv=bc[0], block_k_dkv=bc[1],
                                block_q_dq=bc[2], block_k_dq=bc[3], num_warps_bwd=bc[4],
                                num_stages_bwd=bc[5])
      bwd_scores[bc] = run_cfg(cfg, True)[1]
      rows.append(dict(kind="sweep_bwd", d=d, S=s_len, cfg=bc, bwd_mean_nc=bwd_scores[bc]))
      print(f"d{d} S{s_len} bwd (bq_dkv, bk_dkv, bq_dq, bk_dq, warps, stages)={bc}: {bwd_scores[bc]:.0f} TFLOP/s", flush=True)
    if bwd_scores:
      print(f"d{d}: best fwd {best_f} best bwd {max(bwd_scores, key=bwd_scores.get)}", flush=True)
    # --- the workload cells with the default config vs JAX's mha ---
    for s_len in (4096, 16384):
      b, n = 16384 // s_len, 2048 // d
      shape = (b, s_len, n, d)
      q, k, v = (jax.random.normal(x, shape, jnp.bfloat16) for x in (kq, kk, kv))
      do = jax.random.normal(kd, shape, jnp.float32)
      for causal in (False, True):
        flops = 4 * b * n * s_len * s_len * d * (0.5 if causal else 1.0)
        ref = jax_mha.mha(q, k, v, None, sm_scale=1 / math.sqrt(d), causal=causal)
        ours = pf.flash_attention(q, k, v, is_causal=causal, implementation="triton")
        err = float(jnp.max(jnp.abs(ref.astype(jnp.float32) - ours.astype(jnp.float32))))
        f_m, b_m = measure(lambda q, k, v: jax_mha.mha(
            q, k, v, None, sm_scale=1 / math.sqrt(d), causal=causal), q, k, v, do, flops)
        f_o, b_o = measure(lambda q, k, v: pf.flash_attention(
            q, k, v, is_causal=causal, implementation="triton"), q, k, v, do, flops)
        rows.append(dict(kind="cell", d=d, S=s_len, causal=causal, ours_fwd=f_o, ours_bwd=b_o,
                         mha_fwd=f_m, mha_bwd=b_m, max_abs_diff_vs_mha=err))
        print(f"cell d{d} S{s_len} {'C' if causal else 'N'}: ours fwd {f_o:.0f} bwd {b_o:.0f} | "
              f"mha fwd {f_m:.0f} bwd {b_m:.0f} | ratio fwd {f_o/f_m:.2f} bwd {b_o/b_m:.2f} | maxdiff {err:.3g}",
              flush=True)
  if args.json:
    with open(args.json, "w") as f:
      json.dump(dict(date=str(datetime.date.today()), device=dev, jax=jax.__version__, rows=rows), f, indent=1)
  print("\n| cell | ours fwd | mha fwd | ratio | ours bwd | mha bwd | ratio |\n|---|---|---|---|---|---|---|")
  for r in rows:
    if r["kind"] == "cell":
      print(f"| d{r['d']} S{r['S']} {'C' if r['causal'] else 'N'} | {r['ours_fwd']:.0f} | {r['mha_fwd']:.0f} | "
            f"{r['ours_fwd']/r['mha_fwd']:.2f} | {r['ours_bwd']:.0f} | {r['mha_bwd']:.0f} | {r['ours_bwd']/r['mha_bwd']:.2f} |")


if __name__ == "__main__":
  main()
