"""A ``flax.linen`` multi-head attention layer computed by pallas_flash.

Parameters are laid out as in ``flax.linen.MultiHeadDotProductAttention``
(``query``/``key``/``value``/``out`` ``DenseGeneral`` submodules, optional
``query_ln``/``key_ln``), so a checkpoint of one loads into the other when
``num_kv_heads == num_heads``.  Causality, padding and packing are passed as
flags, lengths and ids: no N x N mask is built.
"""
from __future__ import annotations

import functools
from typing import Any

import flax.linen as nn
import jax.numpy as jnp
from flax.linen.linear import default_kernel_init

from pallas_flash import api
from pallas_flash.flax import attention as _attention

Array = Any


class MultiHeadAttention(nn.Module):
  """Multi-head (GQA / MQA) self- or cross-attention with pallas_flash.

  Example::

    >>> import jax, jax.numpy as jnp
    >>> from pallas_flash.flax import linen as pf_linen
    >>> layer = pf_linen.MultiHeadAttention(num_heads=4, num_kv_heads=2)
    >>> x = jnp.ones((2, 16, 32))                       # [batch, length, features]
    >>> lengths = jnp.array([16, 9])                    # right padding
    >>> params = layer.init(jax.random.key(0), x)
    >>> y = layer.apply(params, x, is_causal=True, seq_lengths=lengths)

  Attributes:
    num_heads: query heads N; ``qkv_features`` must be a multiple of it.
    num_kv_heads: key/value heads K (``None``: N); N must be a multiple of K.
      K < N is grouped-query attention, K == 1 multi-query attention.
    dtype: computation dtype (``None``: inferred from inputs and params).
    param_dtype: parameter dtype.
    qkv_features: N * H (``None``: the query input's features).
    out_features: output features (``None``: the query input's features).
    use_bias: whether the q/k/v/out projections have biases.
    kernel_init, out_kernel_init, bias_init, out_bias_init: initialisers, with
      the defaults of ``flax.linen.MultiHeadDotProductAttention``.
    precision: precision of the projections.
    normalize_qk: LayerNorm on queries and keys (arxiv.org/abs/2302.05442).
    dropout_rate: attention dropout in the kernel (``rngs={"dropout": ...}``
      when not deterministic), as in ``flax.linen.MultiHeadDotProductAttention``.
    broadcast_dropout: one dropout mask for every batch row and head.
    deterministic: no dropout; merged with ``__call__``'s as in Flax.
    implementation, causal_alignment, local_window_size, logits_soft_cap,
      config: as in :func:`pallas_flash.flash_attention`.
    deterministic_backward: :func:`pallas_flash.flash_attention`'s
      ``deterministic`` (False: a faster backward whose dQ bits may change
      from run to run; ``deterministic`` above is Flax's "no dropout").
  """

  num_heads: int
  num_kv_heads: int | None = None
  dtype: Any = None
  param_dtype: Any = jnp.float32
  qkv_features: int | None = None
  out_features: int | None = None
  use_bias: bool = True
  kernel_init: Any = default_kernel_init
  out_kernel_init: Any = None
  bias_init: Any = nn.initializers.zeros_init()
  out_bias_init: Any = None
  precision: Any = None
  normalize_qk: bool = False
  dropout_rate: float = 0.0
  broadcast_dropout: bool = True
  deterministic: bool | None = None
  implementation: api.Implementation | None = None
  causal_alignment: str = "top_left"
  local_window_size: int | tuple[int, int] | None = None
  logits_soft_cap: float | None = None
  config: Any = None
  deterministic_backward: bool = True

  @nn.compact
  def __call__(self, inputs_q: Array, inputs_k: Array | None = None,
               inputs_v: Array | None = None, *, is_causal: bool = False,
               padding_mask: Array | None = None,
               kv_padding_mask: Array | None = None,
               seq_lengths: Array | None = None,
               kv_seq_lengths: Array | None = None,
               segment_ids: Array | None = None,
               kv_segment_ids: Array | None = None,
               mask: Array | None = None,
               deterministic: bool | None = None,
               dropout_rng: Array | None = None) -> Array:
    """Projects, attends and projects back.

    ``inputs_k`` defaults to ``inputs_q`` (self-attention) and ``inputs_v`` to
    ``inputs_k``.  In self-attention the ``kv_*`` arguments default to their
    query-side counterparts; in cross-attention they default to "no padding".
    Give each side's padding at most one way (mask or lengths).

    Args:
      inputs_q: ``[batch..., T, features]``.
      inputs_k: ``[batch..., S, kv_features]`` or ``None``.
      inputs_v: ``[batch..., S, kv_features]`` or ``None``.
      is_causal: causal mask, aligned per ``causal_alignment``.
      padding_mask: bool ``[batch..., T]``, True for real tokens.  Suffix
        padding becomes lengths, any other pattern segment ids (chosen at run
        time, see ``attention.padded_flash_attention``).
      kv_padding_mask: bool ``[batch..., S]``, likewise for keys.
      seq_lengths: int ``[batch...]``: tokens ``>= length`` are padding.
      kv_seq_lengths: int ``[batch...]``, likewise for keys.
      segment_ids: int ``[batch..., T]`` for packed sequences: tokens attend
        within their segment; negative ids are padding.
      kv_segment_ids: int ``[batch..., S]``.
      mask: optional dense boolean mask broadcastable to
        ``[batch..., N, T, S]`` (the slow path; prefer the arguments above).
      deterministic: no attention dropout (merged with the attribute).
      dropout_rng: dropout key; default ``self.make_rng("dropout")``.

    Returns:
      ``[batch..., T, out_features]``.  Padded query rows attend to nothing:
      their attention output is zero, so the layer returns the ``out`` bias
      there (Flax's own attention would average ``value`` instead).
    """
    inputs_k, inputs_v, padding = _attention.resolve_inputs(
        inputs_q, inputs_k, inputs_v, dict(
            padding_mask=padding_mask, kv_padding_mask=kv_padding_mask,
            seq_lengths=seq_lengths, kv_seq_lengths=kv_seq_lengths,
            segment_ids=segment_ids, kv_segment_ids=kv_segment_ids))
    features = self.out_features or inputs_q.shape[-1]
    qkv_features = self.qkv_features or inputs_q.shape[-1]
    num_kv_heads = self.num_kv_heads or self.num_heads
    head_dim = _attention.head_dim_of(qkv_features, self.num_heads,
                                      num_kv_heads)

    dense = functools.partial(
        nn.DenseGeneral, axis=-1, dtype=self.dtype,
        param_dtype=self.param_dtype, kernel_init=self.kernel_init,
        bias_init=self.bias_init, use_bias=self.use_bias,
        precision=self.precision)
    query = dense(features=(self.num_heads, head_dim), name="query")(inputs_q)
    key = dense(features=(num_kv_heads, head_dim), name="key")(inputs_k)
    value = dense(features=(num_kv_heads, head_dim), name="value")(inputs_v)
    if self.normalize_qk:
      ln = functools.partial(nn.LayerNorm, use_bias=False, dtype=self.dtype,
                             param_dtype=self.param_dtype)
      query = ln(name="query_ln")(query)
      key = ln(name="key_ln")(key)

    if self.dropout_rate > 0.0:
      deterministic = nn.merge_param("deterministic", self.deterministic,
                                     deterministic)
      if not deterministic and dropout_rng is None:
        dropout_rng = self.make_rng("dropout")
    x = _attention.attend(
        query, key, value, is_causal=is_causal, mask=mask, dtype=self.dtype,
        **_attention.dropout_kwargs(self.dropout_rate, deterministic,
                                    dropout_rng, self.broadcast_dropout),
        **_attention.AttentionOptions(
            implementation=self.implementation,
            causal_alignment=self.causal_alignment,
            local_window_size=self.local_window_size,
            logits_soft_cap=self.logits_soft_cap, config=self.config,
            deterministic_backward=self.deterministic_backward).kwargs(),
        **padding)
    return nn.DenseGeneral(
        features=features, axis=(-2, -1),
        kernel_init=self.out_kernel_init or self.kernel_init,
        bias_init=self.out_bias_init or self.bias_init,
        use_bias=self.use_bias, dtype=self.dtype,
        param_dtype=self.param_dtype, precision=self.precision,
        name="out")(x)

