"""fwd+bwd past 2^31 elements on one GPU (``.ci/gpu``'s second step).

B1, S = 1,048,600, 16 heads, d128, bf16, causal: q, k, v hold 2^31 + 48k
elements each (4 GiB), so every index past row 1,048,576 overflows 32-bit
element arithmetic.  The f32 reference runs on sampled rows only: out, lse
and dq of sampled query rows (the last 24 among them) against all their
keys; dk and dv of sampled key rows against every query row, with P from the
kernel's lse (itself checked on the sampled rows).  About 60 GB of GPU
memory: it runs alone, with XLA's platform allocator (no pool to fragment).
"""
from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_flash as pf
from cases import TOL, rel_err

pytestmark = pytest.mark.huge

S, N, H = 1_048_600, 16, 128
ROWS = np.r_[0, 1, 2047, 524_289, 1_000_000, S - 24:S]  # the last 24: > 2^31


def _too_small() -> bool:
  """No GPU, or one whose allocator reports less than 64 GiB (the platform
  allocator, which .ci/gpu picks here, reports no limit)."""
  if jax.default_backend() != "gpu":
    return True
  limit = (jax.devices()[0].memory_stats() or {}).get("bytes_limit")
  return limit is not None and limit < 64 * 2**30


@pytest.mark.skipif(_too_small(), reason="needs a GPU with 64 GiB free")
def test_fwd_bwd_past_2_31_elements():
  assert S * N * H > 2**31
  # Drawn in row blocks: one draw of 2^31 normals takes 8 GiB of counters.
  q, k, v, d_out = (jnp.concatenate([
      jax.random.normal(jax.random.fold_in(key, i), (1, rows, N, H),
                        jnp.bfloat16)
      for i, rows in enumerate(np.diff(np.r_[0:S:1 << 17, S]))], axis=1)
      for key in jax.random.split(jax.random.key(0), 4))

  @jax.jit
  def fwd_bwd(q, k, v, d_out):
    (out, lse), vjp = jax.vjp(lambda q, k, v: pf.flash_attention(
        q, k, v, is_causal=True, return_residual=True), q, k, v)
    return out, lse, *vjp((d_out, jnp.zeros_like(lse)))

  compiled = fwd_bwd.lower(q, k, v, d_out).compile()
  mem = compiled.memory_analysis()
  gib = lambda x: f"{x / 2**30:.1f} GiB"
  print(f"fwd+bwd B1 S{S} N{N} d{H} bf16 causal: arguments "
        f"{gib(mem.argument_size_in_bytes)}, outputs "
        f"{gib(mem.output_size_in_bytes)}, temporaries "
        f"{gib(mem.temp_size_in_bytes)}")
  start = time.perf_counter()
  out, lse, dq, dk, dv = jax.block_until_ready(compiled(q, k, v, d_out))
  print(f"fwd+bwd ran in {time.perf_counter() - start:.1f} s")
  rows = jnp.asarray(ROWS)
  got = tuple(x[0, rows] for x in (out, lse, dq, dk, dv))
  del dq, dk, dv
  want = (*_query_rows(q, k, v, d_out, rows),
          *_key_rows(q, k, v, d_out, out, lse, rows))
  tol = TOL["bfloat16"]
  for name, g, w in zip(("out", "lse", "dq", "dk", "dv"), got, want):
    if name == "lse":
      np.testing.assert_allclose(g, w, atol=tol["lse"], rtol=tol["lse"])
    else:
      err = rel_err(g, w)
      assert err <= tol["out" if name == "out" else "grad"], (name, err)


def _dot(spec, a, b):
  return jnp.einsum(spec, a, b, preferred_element_type=jnp.float32)


@jax.jit
def _query_rows(q, k, v, d_out, rows):
  """f32 (out, lse, dq) of query rows ``rows`` against every key; [1, S, N,
  H] bf16 inputs (no copies of [S, N, H] slices: 4 GiB each), products
  accumulated in f32 (exact for bf16 operands).  Causal top-left."""
  q, k, v, d_out = q[0], k[0], v[0], d_out[0]
  s = _dot("rnh,snh->rns", q[rows], k) * q.shape[-1] ** -0.5
  s = jnp.where(jnp.arange(k.shape[0]) <= rows[:, None, None], s, -jnp.inf)
  lse = jax.nn.logsumexp(s, axis=-1)  # [R, N]
  p = jnp.exp(s - lse[..., None])
  out = _dot("rns,snh->rnh", p, v)
  dp = _dot("rnh,snh->rns", d_out[rows], v)
  delta = jnp.sum(d_out[rows].astype(jnp.float32) * out, -1)
  dq = _dot("rns,snh->rnh", p * (dp - delta[..., None]), k)
  return out, lse, dq * q.shape[-1] ** -0.5


def _key_rows(q, k, v, d_out, out, lse, rows, chunk: int = 1 << 16):
  """f32 (dk, dv) of key rows ``rows``: sums over every query row i >= j,
  in chunks of query rows, with P from the kernel's lse (checked on the
  sampled rows) and delta from its output."""
  dk = dv = 0.0
  k_rows, v_rows = k[0][rows], v[0][rows]
  for start in range(0, q.shape[1], chunk):
    part = slice(start, start + chunk)
    ddk, ddv = _key_rows_chunk(q[0, part], d_out[0, part], out[0, part],
                               lse[0, part], k_rows, v_rows, rows, start)
    dk, dv = dk + ddk, dv + ddv
  return dk, dv


@jax.jit
def _key_rows_chunk(q, d_out, out, lse, k_rows, v_rows, rows, start):
  scale = q.shape[-1] ** -0.5
  s = _dot("snh,rnh->snr", q, k_rows) * scale  # [chunk, N, R]
  visible = (start + jnp.arange(q.shape[0]))[:, None, None] >= rows
  p = jnp.where(visible, jnp.exp(s - lse[..., None]), 0.0)
  dv = _dot("snr,snh->rnh", p, d_out)
  delta = jnp.sum(d_out.astype(jnp.float32) * out.astype(jnp.float32), -1)
  dp = _dot("snh,rnh->snr", d_out, v_rows)
  dk = _dot("snr,snh->rnh", p * (dp - delta[..., None]), q) * scale
  return dk, dv
