"""The tests' workloads and checks.

A ``Case`` is a ``benchmarks.workloads.Workload`` (the one workload
description of the tests and the benchmarks) at sizes small enough for
Pallas interpret mode on a 2-core CPU; ``Workload.inputs`` builds its random
arrays and keyword options for ``flash_attention``.
"""
from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np

import pallas_flash as pf
from benchmarks.workloads import Workload


def Case(name: str, b: int = 2, t: int = 17, s: int = 17, n: int = 2,
         k: int = 2, h: int = 64, dtype: str = "float32", causal: bool = False,
         **options) -> Workload:
  """A test's ``Workload``: interpret-mode sizes, float32 by default, the
  letters B T S N K H; ``options`` are Workload's mask fields (window,
  q_lengths, segments, dense_mask, alibi, config, ...)."""
  return Workload(name=name, batch=b, seqlen=t, kv_seqlen=s, heads=n,
                  kv_heads=k, head_dim=h, dtype=dtype, causal=causal,
                  **options)


# Tolerances on max|x - ref| / max|ref| (outputs, gradients) and max|lse - ref|.
TOL = {"float32": dict(out=2e-5, grad=1e-4, lse=1e-5),
       "bfloat16": dict(out=2e-2, grad=4e-2, lse=2e-3),
       "float16": dict(out=4e-3, grad=1e-2, lse=2e-3)}

FORWARD = [
    Case("plain"),
    Case("t1_s1", t=1, s=1),
    Case("t1_s97_causal_br", t=1, s=97, causal=True, bottom_right=True),
    Case("t97_s130", t=97, s=130, h=40),
    Case("t130_s97_causal", t=130, s=97, causal=True, h=80),
    Case("t97_s130_causal_br", t=97, s=130, causal=True, bottom_right=True, h=96),
    Case("causal_h128", t=97, s=97, causal=True, h=128),
    Case("h256", t=33, s=33, h=256, n=1, k=1, b=1),
    Case("gqa", n=4, k=2, t=97, s=97, causal=True),
    Case("mqa", n=4, k=1, t=17, s=33, h=40),
    Case("window", t=97, s=97, window=(5, 3)),
    Case("window_causal", t=97, s=130, window=(20, 0), causal=True, bottom_right=True),
    Case("lengths", t=97, s=97, q_lengths=(50, 97), kv_lengths=(97, 30)),
    Case("lengths_causal_br", t=97, s=130, q_lengths=(40, 97), kv_lengths=(100, 7),
         causal=True, bottom_right=True),
    Case("segments", t=130, s=130, segments=True),
    Case("segments_causal_gqa", t=97, s=97, segments=True, causal=True, n=4, k=2),
    Case("soft_cap", t=97, s=97, soft_cap=5.0, causal=True),
    Case("mask_full", t=97, s=97, dense_mask="full"),
    Case("mask_keys", t=33, s=97, dense_mask="keys"),
    Case("mask_heads_causal", t=33, s=33, dense_mask="heads", causal=True, n=4, k=1),
    Case("bf16", t=97, s=130, dtype="bfloat16", causal=True),
    Case("bf16_h80_gqa", t=97, s=97, h=80, n=4, k=2, dtype="bfloat16"),
    Case("fp16", t=97, s=97, dtype="float16", window=(7, 7)),
    Case("fp16_h40_segments", t=33, s=33, h=40, dtype="float16", segments=True),
    Case("bf16_mask_full_gqa", t=97, s=130, n=4, k=2, dtype="bfloat16", dense_mask="full",
         causal=True, bottom_right=True),
]

GRADIENT = [
    Case("g_plain", t=33, s=33),
    Case("g_t97_s130_causal_br", t=97, s=130, causal=True, bottom_right=True, h=40),
    Case("g_t130_s97", t=130, s=97, h=80),
    Case("g_gqa_causal", n=4, k=2, t=97, s=97, causal=True),
    Case("g_mqa_window", n=4, k=1, t=33, s=33, window=(4, 2)),
    Case("g_lengths", t=97, s=97, q_lengths=(50, 97), kv_lengths=(97, 30), causal=True),
    Case("g_segments", t=97, s=97, segments=True, n=4, k=2),
    Case("g_soft_cap", t=33, s=33, soft_cap=3.0),
    Case("g_mask_full", t=33, s=97, dense_mask="full", n=4, k=2),
    Case("g_mask_heads_gqa", t=33, s=33, dense_mask="heads", n=4, k=2),
    Case("g_h128_bf16", t=97, s=97, h=128, causal=True, dtype="bfloat16"),
    Case("g_h96_fp16", t=33, s=33, h=96, dtype="float16"),
    Case("g_h256", t=17, s=17, h=256, n=1, k=1, b=1),
    Case("g_bf16_mask_keys", t=33, s=97, dense_mask="keys", dtype="bfloat16"),
]


def rel_err(x, ref):
  """max|x - ref| / max|ref|, in float32."""
  x, ref = np.asarray(x, np.float32), np.asarray(ref, np.float32)
  return float(np.max(np.abs(x - ref)) / max(np.max(np.abs(ref)), 1e-6))


def upcast(*xs):
  return [x.astype(jnp.float32) for x in xs]


def check_forward(case: Workload, impl: str, seed: int = 0):
  """``flash_attention(implementation=impl)`` against the float32 XLA path:
  shapes, dtypes, finiteness, output and LSE within ``TOL``."""
  q, k, v, kw = case.inputs(seed)
  out, lse = pf.flash_attention(q, k, v, implementation=impl, config=case.config,
                                return_residual=True, **kw)
  ref, ref_lse = pf.flash_attention(*upcast(q, k, v), implementation="xla",
                                    return_residual=True, **kw)
  chex.assert_shape(out, q.shape)
  chex.assert_shape(lse, q.shape[:-1])
  assert out.dtype == q.dtype and lse.dtype == jnp.float32
  chex.assert_tree_all_finite((out, lse))
  tol = TOL[case.dtype]
  assert rel_err(out, ref) <= tol["out"], (case.name, rel_err(out, ref))
  np.testing.assert_allclose(lse, ref_lse, atol=tol["lse"], rtol=tol["lse"])
  return out, lse


def check_gradients(case: Workload, impl: str, seed: int = 0):
  """dq, dk, dv of ``flash_attention(implementation=impl)`` against the
  float32 XLA path's VJP with the same random cotangent: dtypes, shapes,
  finiteness and ``TOL``.  Returns the gradients."""
  q, k, v, kw = case.inputs(seed)
  d_out = jax.random.normal(jax.random.key(seed + 7), q.shape,
                            jnp.float32).astype(q.dtype)
  _, vjp = jax.vjp(lambda q, k, v: pf.flash_attention(
      q, k, v, implementation=impl, config=case.config, **kw), q, k, v)
  _, ref_vjp = jax.vjp(lambda q, k, v: pf.flash_attention(
      q, k, v, implementation="xla", **kw), *upcast(q, k, v))
  grads = vjp(d_out)
  for name, g, r, x in zip("qkv", grads, ref_vjp(d_out.astype(jnp.float32)),
                           (q, k, v)):
    assert g.dtype == x.dtype and g.shape == x.shape, name
    chex.assert_tree_all_finite(g)
    assert rel_err(g, r) <= TOL[case.dtype]["grad"], (case.name, name,
                                                     rel_err(g, r))
  return grads
