"""Plain-jnp attention in float32 at HIGHEST precision: the tests' ground
truth, the ``implementation="xla"`` path and the CPU fallback.

It materialises the [B, N, T, S] scores (O(N^2) memory) on purpose: it is the
definition, not a fast path.  Shapes as in ``masks``: q [B, T, N, H],
k/v [B, S, K, H], bias broadcastable to [B, N, T, S].
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from pallas_flash import masks

HIGHEST = jax.lax.Precision.HIGHEST


def attention(q, k, v, bias, arrays: masks.MaskArrays, *, spec: masks.MaskSpec,
              scale: float, logits_soft_cap: float | None):
  """Returns (out [B, T, N, H] in q.dtype, lse [B, T, N] float32).

  s = scale * q k^T; s = cap * tanh(s / cap) if soft-capped; s += bias; masked
  entries removed; out = softmax(s) v.  Fully masked rows: out 0,
  lse ``masks.MASKED_LSE``.
  """
  out_dtype = q.dtype
  b, t, n, h = q.shape
  _, s_len, kh, _ = k.shape
  q, k, v = (x.astype(jnp.float32) for x in (q, k, v))
  group = n // kh
  k = jnp.repeat(k, group, axis=2)  # query head n reads kv head n // group
  v = jnp.repeat(v, group, axis=2)
  s = jnp.einsum("btnh,bsnh->bnts", q, k, precision=HIGHEST) * scale
  if logits_soft_cap is not None:
    s = logits_soft_cap * jnp.tanh(s / logits_soft_cap)
  if bias is not None:
    s = s + bias.astype(jnp.float32)
  visible = masks.dense_mask(spec, arrays, t, s_len)  # [B, 1|N, T, S]
  s = jnp.where(visible, s, masks.MASK_VALUE)
  m = jax.lax.stop_gradient(jnp.max(s, axis=-1, keepdims=True))
  e = jnp.where(visible, jnp.exp(s - m), 0.0)
  l = jnp.sum(e, axis=-1, keepdims=True)
  p = e / jnp.where(l > 0, l, 1.0)
  out = jnp.einsum("bnts,bsnh->btnh", p, v, precision=HIGHEST)
  lse = jnp.where(l > 0, m + jnp.log(jnp.where(l > 0, l, 1.0)), masks.MASKED_LSE)
  lse = jnp.transpose(lse[..., 0], (0, 2, 1))  # [B, T, N]
  return out.astype(out_dtype), jax.lax.stop_gradient(lse)
