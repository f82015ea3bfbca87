"""Flax glue shared by the linen and nnx layers: a Flax-compatible
``attention_fn`` and the translation of per-token padding into lengths or
segment ids (never an N x N mask).

Letters as in :mod:`pallas_flash.api`: B batch, T query length, S key/value
length, N query heads, K key/value heads, H head dim.  Flax adds leading batch
dims: ``[batch..., T, N, H]``; they are flattened into one B here.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp

from pallas_flash import api


@dataclasses.dataclass(frozen=True, kw_only=True)
class AttentionOptions:
  """The pallas_flash options that Flax's attention signature has no room for.

  Each field is the :func:`pallas_flash.flash_attention` argument of the same
  name; ``is_causal`` is OR-ed with the ``is_causal`` Flax passes (nnx does).
  ``deterministic_backward`` is ``flash_attention``'s ``deterministic`` (the
  name ``deterministic`` is Flax's "no dropout").  The linen and nnx layers
  pass their options through ``kwargs`` too.
  """

  implementation: api.Implementation | None = None
  is_causal: bool = False
  causal_alignment: str = "top_left"
  local_window_size: int | tuple[int, int] | None = None
  logits_soft_cap: float | None = None
  scale: float | None = None
  config: Any = None
  deterministic_backward: bool = True

  def kwargs(self) -> dict[str, Any]:
    return dict(implementation=self.implementation,
                causal_alignment=self.causal_alignment,
                local_window_size=self.local_window_size,
                logits_soft_cap=self.logits_soft_cap, scale=self.scale,
                config=self.config,
                deterministic=self.deterministic_backward)


def make_attention_fn(*, implementation: api.Implementation | None = None,
                      is_causal: bool = False,
                      causal_alignment: str = "top_left",
                      local_window_size: int | tuple[int, int] | None = None,
                      logits_soft_cap: float | None = None,
                      scale: float | None = None, config: Any = None,
                      deterministic_backward: bool = True):
  """Returns an ``attention_fn`` for Flax's attention modules.

  The result takes the arguments of ``flax.linen.dot_product_attention`` and
  ``flax.nnx.dot_product_attention`` and computes them with
  :func:`pallas_flash.flash_attention`, so it drops into
  ``flax.linen.MultiHeadDotProductAttention(attention_fn=...)`` and
  ``flax.nnx.MultiHeadAttention(attention_fn=...)`` unchanged.  The keyword
  arguments here are fixed for every call (``is_causal=True`` gives causal
  attention without building Flax's ``[T, S]`` causal mask).

  Example::

    >>> import flax.linen as nn
    >>> from pallas_flash.flax import make_attention_fn
    >>> layer = nn.MultiHeadDotProductAttention(
    ...     num_heads=4, attention_fn=make_attention_fn(is_causal=True))

  Args:
    implementation: as in :func:`pallas_flash.flash_attention`; ``None`` runs
      the GPU kernels on a GPU and the float32 reference elsewhere.
    is_causal: causal masking on every call (top-left aligned unless
      ``causal_alignment="bottom_right"``), in addition to any Flax mask.
    causal_alignment, local_window_size, logits_soft_cap, scale, config: as in
      :func:`pallas_flash.flash_attention`.
    deterministic_backward: :func:`pallas_flash.flash_attention`'s
      ``deterministic`` (False: a faster backward whose dQ bits may change
      from run to run; Flax's own ``deterministic`` means "no dropout").

  Returns:
    A function ``attention_fn(query, key, value, bias=None, mask=None, ...)``
    with Flax's signature; see :func:`attention_fn`.
  """
  options = AttentionOptions(
      implementation=implementation, is_causal=is_causal,
      causal_alignment=causal_alignment, local_window_size=local_window_size,
      logits_soft_cap=logits_soft_cap, scale=scale, config=config,
      deterministic_backward=deterministic_backward)

  def flax_attention_fn(query, key, value, bias=None, mask=None,
                        broadcast_dropout: bool = True, dropout_rng=None,
                        dropout_rate: float = 0.0, deterministic: bool = False,
                        dtype=None, precision=None, module=None,
                        is_causal: bool = False,
                        force_fp32_for_softmax: bool = False,
                        qk_attn_weights_einsum=None,
                        attn_weights_value_einsum=None):
    del force_fp32_for_softmax  # the softmax is always float32 here
    del precision  # see attention_fn's docstring
    if module is not None:
      raise NotImplementedError(
          "pallas_flash never materialises the attention weights, so they "
          f"cannot be sown into {type(module).__name__}; call the module "
          "with sow_weights=False")
    if qk_attn_weights_einsum is not None or attn_weights_value_einsum is not None:
      raise NotImplementedError(
          "custom attention einsums (qk_attn_weights_einsum / "
          "attn_weights_value_einsum, e.g. AQT quantisation) cannot be "
          "applied inside the fused pallas_flash kernels")
    return _flax_attention(query, key, value, bias, mask, dtype=dtype,
                           is_causal=bool(is_causal) or options.is_causal,
                           options=options,
                           **dropout_kwargs(dropout_rate, deterministic,
                                            dropout_rng, broadcast_dropout))

  flax_attention_fn.__doc__ = _ATTENTION_FN_DOC
  flax_attention_fn.__name__ = flax_attention_fn.__qualname__ = "attention_fn"
  return flax_attention_fn


_ATTENTION_FN_DOC = """Flax-compatible attention computed by pallas_flash.

  Same arguments as ``flax.linen.dot_product_attention`` /
  ``flax.nnx.dot_product_attention``.

  Args:
    query: ``[batch..., T, N, H]``.
    key: ``[batch..., S, K, H]`` with ``N % K == 0`` (GQA / MQA).
    value: same shape as ``key``.
    bias: optional additive bias broadcastable to ``[batch..., N, T, S]``
      (read tile by tile by the kernels; its gradient is computed when asked
      for).
    mask: optional mask broadcastable to ``[batch..., N or 1, T, S]``, e.g.
      from ``make_causal_mask`` / ``make_attention_mask``; nonzero = attend.
      It is passed on as a dense boolean ``mask=`` (read tile by tile).
    broadcast_dropout: one dropout mask for every batch row and head (Flax's
      default, True).
    dropout_rng: JAX PRNG key, required when dropping.
    dropout_rate: attention dropout rate in [0, 1), applied in the kernel
      (``pallas_flash.dropout_mask`` gives its keep mask; the bits differ
      from Flax's ``jax.random.bernoulli``, the distribution is the same).
    deterministic: no dropout when True.
    dtype: compute dtype; ``None`` promotes query, key and value to a common
      dtype, as Flax does.
    precision: accepted for compatibility and not used: the reference
      computes in float32 at ``HIGHEST`` and the kernels accumulate in
      float32.
    module: must be ``None`` (Flax passes the module only to sow the
      attention weights, which are never materialised).
    is_causal: top-left causal mask as nnx's (OR-ed with the factory's).
    force_fp32_for_softmax: always satisfied (the softmax runs in float32).
    qk_attn_weights_einsum, attn_weights_value_einsum: must be ``None``.

  Returns:
    ``[batch..., T, N, H]`` in the compute dtype.  A query row whose mask is
    all False outputs zeros, whereas Flax's own attention averages ``value``
    over such a row.

  Raises:
    ValueError: malformed shapes (see :func:`pallas_flash.flash_attention`).
    NotImplementedError: sowing attention weights, custom einsums.
  """

attention_fn = make_attention_fn()


def dropout_kwargs(rate, deterministic, rng, broadcast) -> dict[str, Any]:
  """Flax's dropout arguments as :func:`pallas_flash.flash_attention`'s:
  no dropout when ``deterministic`` or ``rate == 0``."""
  if deterministic or not rate:
    return {}
  return dict(dropout_rate=rate, dropout_rng=rng,
              broadcast_dropout=bool(broadcast))


def _flax_attention(query, key, value, bias, mask, *, dtype, is_causal,
                    options: AttentionOptions, **dropout):
  query, key, value = (jnp.asarray(x) for x in (query, key, value))
  if dtype is None:
    dtype = jnp.result_type(query, key, value)
  query, key, value = (x.astype(dtype) for x in (query, key, value))
  if query.ndim < 3 or key.ndim != query.ndim or value.ndim != query.ndim:
    raise ValueError(f"query, key and value must be [batch..., length, heads, "
                     f"head_dim] of one rank, got query {query.shape}, key "
                     f"{key.shape}, value {value.shape}")
  batch = query.shape[:-3]
  if key.shape[:-3] != batch or value.shape[:-3] != batch:
    raise ValueError(f"batch dims of query {query.shape}, key {key.shape} and "
                     f"value {value.shape} must match")
  t, n = query.shape[-3:-1]
  s = key.shape[-3]
  flat = lambda x: x.reshape((math.prod(batch),) + x.shape[-3:])
  if mask is not None:
    mask = flatten_batch(jnp.asarray(mask).astype(jnp.bool_), batch, (n, t, s),
                         "mask")
  if bias is not None:
    bias = flatten_batch(jnp.asarray(bias), batch, (n, t, s), "bias")
  out = api.flash_attention(flat(query), flat(key), flat(value), bias, mask,
                            is_causal=is_causal, **options.kwargs(), **dropout)
  return out.reshape(batch + out.shape[1:])


def flatten_batch(x, batch: tuple[int, ...], tail: tuple[int, ...], name: str):
  """``x`` broadcastable to ``batch + tail`` -> ``[B or 1, *tail or 1]``."""
  full = batch + tail
  if x.ndim > len(full):
    raise ValueError(f"{name} of shape {x.shape} has more dims than "
                     f"[batch..., N, T, S] = {list(full)}")
  x = x.reshape((1,) * (len(full) - x.ndim) + x.shape)
  if any(d not in (1, f) for d, f in zip(x.shape, full)):
    raise ValueError(f"{name} of shape {x.shape} does not broadcast to "
                     f"[batch..., N, T, S] = {list(full)}")
  nb = len(batch)
  if all(d == 1 for d in x.shape[:nb]):
    return x.reshape((1,) + x.shape[nb:])
  x = jnp.broadcast_to(x, batch + x.shape[nb:])
  return x.reshape((-1,) + x.shape[nb:])


def head_dim_of(qkv_features: int, num_heads: int, num_kv_heads: int) -> int:
  """The layers' head-count check; returns ``qkv_features // num_heads``."""
  if qkv_features % num_heads:
    raise ValueError(f"{qkv_features=} must be a multiple of {num_heads=}")
  if num_kv_heads < 1 or num_heads % num_kv_heads:
    raise ValueError(f"{num_heads=} must be a multiple of {num_kv_heads=}")
  return qkv_features // num_heads


def resolve_inputs(inputs_q, inputs_k, inputs_v, padding: dict[str, Any]):
  """Flax's input defaults, shared by the layers.

  ``inputs_k`` defaults to ``inputs_q`` and ``inputs_v`` to ``inputs_k``; in
  self-attention (``inputs_k is None``) each ``kv_*`` entry of ``padding``
  defaults to its query-side counterpart.  Returns
  ``(inputs_k, inputs_v, padding)``.
  """
  self_attention = inputs_k is None
  if inputs_k is None:
    if inputs_v is not None:
      raise ValueError("inputs_k cannot be None when inputs_v is given")
    inputs_k = inputs_q
  if inputs_v is None:
    inputs_v = inputs_k
  batch = inputs_q.shape[:-2]
  if inputs_k.shape[:-2] != batch or inputs_v.shape[:-2] != batch:
    raise ValueError(f"batch dims of inputs_q {inputs_q.shape}, inputs_k "
                     f"{inputs_k.shape} and inputs_v {inputs_v.shape} must "
                     "match")
  padding = dict(padding)
  if self_attention:
    for name in ("padding_mask", "seq_lengths", "segment_ids"):
      if padding.get("kv_" + name) is None:
        padding["kv_" + name] = padding.get(name)
  return inputs_k, inputs_v, padding


def attend(query, key, value, *, is_causal=False, padding_mask=None,
           kv_padding_mask=None, seq_lengths=None, kv_seq_lengths=None,
           segment_ids=None, kv_segment_ids=None, mask=None, dtype=None,
           **options):
  """Projected ``[batch..., T|S, N|K, H]`` q/k/v -> ``[batch..., T, N, H]``.

  Shared by the linen and nnx layers: flattens Flax's leading batch dims and
  hands padding to :func:`padded_flash_attention`.
  """
  if dtype is None:
    dtype = jnp.result_type(query, key, value)
  query, key, value = (x.astype(dtype) for x in (query, key, value))
  batch = query.shape[:-3]
  t, n = query.shape[-3:-1]
  s = key.shape[-3]
  b = math.prod(batch)

  def flat(x, name, tail):
    if x is None:
      return None
    x = jnp.asarray(x)
    if x.shape != batch + tail:
      raise ValueError(f"{name} must have shape [batch..., ...] = "
                       f"{list(batch + tail)}, got {list(x.shape)}")
    return x.reshape((b,) + tail)

  if mask is not None:
    mask = flatten_batch(
        jnp.asarray(mask).astype(jnp.bool_), batch, (n, t, s), "mask")
  out = padded_flash_attention(
      query.reshape((b,) + query.shape[-3:]),
      key.reshape((b,) + key.shape[-3:]),
      value.reshape((b,) + value.shape[-3:]),
      mask=mask, is_causal=is_causal,
      query_padding_mask=flat(padding_mask, "padding_mask", (t,)),
      kv_padding_mask=flat(kv_padding_mask, "kv_padding_mask", (s,)),
      query_seq_lengths=flat(seq_lengths, "seq_lengths", ()),
      key_value_seq_lengths=flat(kv_seq_lengths, "kv_seq_lengths", ()),
      query_segment_ids=flat(segment_ids, "segment_ids", (t,)),
      key_value_segment_ids=flat(kv_segment_ids, "kv_segment_ids", (s,)),
      **options)
  return out.reshape(batch + out.shape[1:])


def padded_flash_attention(query, key, value, *, query_padding_mask=None,
                           kv_padding_mask=None, query_seq_lengths=None,
                           key_value_seq_lengths=None, query_segment_ids=None,
                           key_value_segment_ids=None, **kwargs):
  """:func:`pallas_flash.flash_attention` that also takes per-token padding.

  ``query_padding_mask`` ``[B, T]`` / ``kv_padding_mask`` ``[B, S]`` are
  boolean, True for real tokens.  They never become an N x N mask:

  * with segment ids, padding tokens get segment id -1 (masks.py: negative
    ids are padding);
  * without, a ``lax.cond`` picks at run time between lengths (when every
    row's padding is a suffix: right-padded batches, the common case, where
    the kernels skip the padded tiles) and segment ids 0 / -1 (any other
    pattern).  Both branches give the same result where both apply.

  Other arguments are those of :func:`pallas_flash.flash_attention` (q, k, v
  ``[B, T|S, N|K, H]``).  A padding mask and lengths for the same side are
  exclusive.
  """
  b, t = query.shape[:2]
  s = key.shape[1]
  q_valid = _padding_mask(query_padding_mask, (b, t), "query_padding_mask")
  kv_valid = _padding_mask(kv_padding_mask, (b, s), "kv_padding_mask")
  if q_valid is not None and query_seq_lengths is not None:
    raise ValueError("give query_padding_mask or query_seq_lengths, not both")
  if kv_valid is not None and key_value_seq_lengths is not None:
    raise ValueError("give kv_padding_mask or key_value_seq_lengths, not both")

  def call(q_len, kv_len, q_seg, kv_seg):
    return api.flash_attention(
        query, key, value, query_seq_lengths=q_len,
        key_value_seq_lengths=kv_len, query_segment_ids=q_seg,
        key_value_segment_ids=kv_seg, **kwargs)

  if q_valid is None and kv_valid is None:
    return call(query_seq_lengths, key_value_seq_lengths, query_segment_ids,
                key_value_segment_ids)

  # Lengths that end after the last real token: exact for suffix padding and
  # a safe bound (letting the kernels skip trailing padded tiles) otherwise.
  q_len = query_seq_lengths if q_valid is None else _end(q_valid)
  kv_len = key_value_seq_lengths if kv_valid is None else _end(kv_valid)

  def with_segments(q_seg, kv_seg):
    if q_valid is not None:
      q_seg = jnp.where(q_valid, q_seg, -1)
    if kv_valid is not None:
      kv_seg = jnp.where(kv_valid, kv_seg, -1)
    return call(q_len, kv_len, q_seg, kv_seg)

  if query_segment_ids is not None or key_value_segment_ids is not None:
    if query_segment_ids is None:
      raise ValueError("key_value_segment_ids given without query_segment_ids")
    q_seg = jnp.asarray(query_segment_ids)
    if key_value_segment_ids is None:
      if t != s:
        raise ValueError(f"key_value_segment_ids is required when T={t} != S={s}")
      key_value_segment_ids = q_seg
    return with_segments(q_seg, jnp.asarray(key_value_segment_ids))

  is_suffix = jnp.logical_and(_is_suffix(q_valid), _is_suffix(kv_valid))
  zeros = lambda length: jnp.zeros((b, length), jnp.int32)
  return jax.lax.cond(
      is_suffix,
      lambda: call(q_len, kv_len, None, None),
      lambda: with_segments(zeros(t), zeros(s)))


def _padding_mask(x, shape, name):
  if x is None:
    return None
  x = jnp.asarray(x)
  if x.shape != shape:
    raise ValueError(f"{name} must have shape [B, length] = {list(shape)}, got "
                     f"{list(x.shape)}")
  if x.dtype != jnp.bool_:
    raise ValueError(f"{name} must be boolean (True = real token), got {x.dtype}")
  return x


def _end(valid):
  """One past the last True of each row (0 for an all-False row): [B] int32."""
  pos = jnp.arange(1, valid.shape[1] + 1, dtype=jnp.int32)
  return jnp.max(jnp.where(valid, pos, 0), axis=1)


def _is_suffix(valid):
  """Whether every row is True...True False...False (scalar bool)."""
  if valid is None:
    return jnp.bool_(True)
  return jnp.all(valid[:, :-1] | ~valid[:, 1:])
