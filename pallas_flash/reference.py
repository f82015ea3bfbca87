"""Plain-jnp attention in float32 at HIGHEST precision: the tests' ground
truth, the ``implementation="xla"`` path and the CPU fallback.

It materialises the [B, N, T, S] scores (O(N^2) memory) on purpose: it is the
definition, not a fast path.  Shapes as in ``masks``: q [B, T, N, H],
k/v [B, S, K, H]; the optional score terms come in ``arrays``: bias
broadcastable to [B, N, T, S], ALiBi slopes [1 | B, N], dropout seeds [B, N].
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from pallas_flash import dropout, masks

HIGHEST = jax.lax.Precision.HIGHEST


# One XLA program per call signature: called outside jit (the CPU fallback, the
# tests' ground truth), its ~50 ops and their VJP would otherwise each compile
# and dispatch on their own.
@functools.partial(jax.jit, static_argnames=("spec", "scale",
                                             "logits_soft_cap",
                                             "dropout_rate"))
def attention(q, k, v, arrays: masks.MaskArrays, *, spec: masks.MaskSpec,
              scale: float, logits_soft_cap: float | None,
              dropout_rate: float = 0.0):
  """Returns (out [B, T, N, H] in q.dtype, lse [B, T, N] float32).

  s = scale * q k^T; s = cap * tanh(s / cap) if soft-capped; s += bias and
  ALiBi; masked entries (and logits a -inf bias sends to ``masks.MASK_VALUE``
  or below) removed; p = softmax(s); with dropout p = p * keep / (1 - rate),
  ``keep`` from ``dropout.keep_mask``; out = p v.  Fully masked rows: out 0,
  lse ``masks.MASKED_LSE``.  lse is that of the softmax before dropout.
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
  visible = masks.dense_mask(spec, arrays, t, s_len)  # [B, 1|N, T, S]
  if arrays.alibi_slopes is not None:
    q_pos = jnp.arange(t, dtype=jnp.int32)[None, None, :, None]
    k_pos = jnp.arange(s_len, dtype=jnp.int32)[None, None, None, :]
    offset = masks.diagonal_offset(spec, arrays.q_len, arrays.kv_len,
                                   arrays.diagonal_shift)
    s = s + masks.alibi_bias(arrays.alibi_slopes[:, :, None, None], q_pos,
                             k_pos, offset[:, None, None, None])
  if arrays.bias is not None:
    # A -inf bias masks its logit (clamped, so no inf - inf = NaN).
    s = jnp.maximum(s + arrays.bias.astype(jnp.float32), masks.MASK_VALUE)
    visible = visible & (s > masks.MASK_VALUE)
  s = jnp.where(visible, s, masks.MASK_VALUE)
  m = jax.lax.stop_gradient(jnp.max(s, axis=-1, keepdims=True))
  e = jnp.where(visible, jnp.exp(s - m), 0.0)
  l = jnp.sum(e, axis=-1, keepdims=True)
  p = e / jnp.where(l > 0, l, 1.0)
  if dropout_rate > 0.0:
    keep = dropout.keep_mask(arrays.dropout_seeds, t, s_len, dropout_rate)
    p = jnp.where(keep, p / (1.0 - dropout_rate), 0.0)
  out = jnp.einsum("bnts,bsnh->btnh", p, v, precision=HIGHEST)
  lse = jnp.where(l > 0, m + jnp.log(jnp.where(l > 0, l, 1.0)), masks.MASKED_LSE)
  lse = jnp.transpose(lse[..., 0], (0, 2, 1))  # [B, T, N]
  return out.astype(out_dtype), jax.lax.stop_gradient(lse)
