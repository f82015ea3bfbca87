"""A ``flax.nnx`` multi-head attention layer computed by pallas_flash.

The nnx twin of :class:`pallas_flash.flax.linen.MultiHeadAttention`: the
submodules (``query``/``key``/``value``/``out`` ``LinearGeneral``, optional
``query_ln``/``key_ln``) are those of ``flax.nnx.MultiHeadAttention`` and are
created in the same order, so the same ``rngs`` give the same parameters and
states load into each other.  Causality, padding and packing are flags,
lengths and ids: no N x N mask is built.
"""
from __future__ import annotations

import functools
from typing import Any

import jax.numpy as jnp
from flax import nnx
from flax.nnx.module import first_from
from flax.nnx.nn.linear import default_kernel_init

from pallas_flash import api
from pallas_flash.flax import attention as _attention

Array = Any


class MultiHeadAttention(nnx.Module):
  """Multi-head (GQA / MQA) self- or cross-attention with pallas_flash.

  Example::

    >>> import jax.numpy as jnp
    >>> from flax import nnx
    >>> from pallas_flash.flax import nnx as pf_nnx
    >>> layer = pf_nnx.MultiHeadAttention(num_heads=4, in_features=32,
    ...                                   num_kv_heads=2, rngs=nnx.Rngs(0))
    >>> x = jnp.ones((2, 16, 32))
    >>> y = layer(x, is_causal=True, seq_lengths=jnp.array([16, 9]))

  Args:
    num_heads: query heads N; ``qkv_features`` must be a multiple of it.
    in_features: features of the query input.
    qkv_features: N * H (``None``: ``in_features``).
    out_features: output features (``None``: ``in_features``).
    num_kv_heads: key/value heads K (``None``: N); N must be a multiple of K.
    in_kv_features: features of the key/value inputs (``None``:
      ``in_features``).
    dtype, param_dtype, kernel_init, out_kernel_init, bias_init,
      out_bias_init, use_bias, precision, normalize_qk: as in
      ``flax.nnx.MultiHeadAttention``.
    implementation, causal_alignment, local_window_size, logits_soft_cap,
      config: as in :func:`pallas_flash.flash_attention`.
    deterministic_backward: :func:`pallas_flash.flash_attention`'s
      ``deterministic`` (False: a faster backward whose dQ bits may change
      from run to run; ``deterministic`` is Flax's "no dropout").
    dropout_rate, broadcast_dropout, deterministic, keep_rngs: attention
      dropout (in the kernel) as in ``flax.nnx.MultiHeadAttention``.
    rngs: parameter initialisation (and, with dropout, the dropout stream).
  """

  def __init__(self, num_heads: int, in_features: int,
               qkv_features: int | None = None,
               out_features: int | None = None,
               num_kv_heads: int | None = None,
               in_kv_features: int | None = None, *, dtype: Any = None,
               param_dtype: Any = jnp.float32,
               kernel_init: Any = default_kernel_init,
               out_kernel_init: Any = None,
               bias_init: Any = nnx.initializers.zeros_init(),
               out_bias_init: Any = None, use_bias: bool = True,
               precision: Any = None, normalize_qk: bool = False,
               implementation: api.Implementation | None = None,
               causal_alignment: str = "top_left",
               local_window_size: int | tuple[int, int] | None = None,
               logits_soft_cap: float | None = None, config: Any = None,
               dropout_rate: float = 0.0, broadcast_dropout: bool = True,
               deterministic: bool | None = None, keep_rngs: bool = True,
               deterministic_backward: bool = True, rngs: nnx.Rngs):
    qkv_features = in_features if qkv_features is None else qkv_features
    out_features = in_features if out_features is None else out_features
    in_kv_features = in_features if in_kv_features is None else in_kv_features
    num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    self.head_dim = _attention.head_dim_of(qkv_features, num_heads,
                                           num_kv_heads)
    self.num_heads = num_heads
    self.num_kv_heads = num_kv_heads
    self.dtype = dtype
    self.dropout_rate = dropout_rate
    self.broadcast_dropout = broadcast_dropout
    self.deterministic = deterministic
    self.attention_options = _attention.AttentionOptions(
        implementation=implementation, causal_alignment=causal_alignment,
        local_window_size=local_window_size, logits_soft_cap=logits_soft_cap,
        config=config, deterministic_backward=deterministic_backward).kwargs()

    linear = functools.partial(
        nnx.LinearGeneral, dtype=dtype, param_dtype=param_dtype,
        kernel_init=kernel_init, bias_init=bias_init, use_bias=use_bias,
        precision=precision, rngs=rngs)
    self.query = linear(in_features, (num_heads, self.head_dim))
    self.key = linear(in_kv_features, (num_kv_heads, self.head_dim))
    self.value = linear(in_kv_features, (num_kv_heads, self.head_dim))
    if normalize_qk:
      ln = functools.partial(nnx.LayerNorm, self.head_dim, use_bias=False,
                             dtype=dtype, param_dtype=param_dtype, rngs=rngs)
      self.query_ln, self.key_ln = ln(), ln()
    else:
      self.query_ln = self.key_ln = nnx.data(None)
    self.out = nnx.LinearGeneral(
        in_features=(num_heads, self.head_dim), out_features=out_features,
        axis=(-2, -1), kernel_init=out_kernel_init or kernel_init,
        bias_init=out_bias_init or bias_init, use_bias=use_bias, dtype=dtype,
        param_dtype=param_dtype, precision=precision, rngs=rngs)
    # As Flax's, after the submodules (same parameters from the same rngs):
    # a forked dropout stream kept for __call__.
    self.rngs = (rngs.dropout.fork() if keep_rngs and dropout_rate > 0
                 else nnx.data(None))

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
               rngs: nnx.Rngs | None = None) -> Array:
    """Projects, attends and projects back.

    Same arguments and defaults as
    :meth:`pallas_flash.flax.linen.MultiHeadAttention.__call__`, with
    ``deterministic`` (taking precedence over the constructor's) and
    ``rngs`` (dropout stream; default the one kept at construction) as in
    ``flax.nnx.MultiHeadAttention``.

    Returns:
      ``[batch..., T, out_features]``; padded query rows get the ``out`` bias.
    """
    inputs_k, inputs_v, padding = _attention.resolve_inputs(
        inputs_q, inputs_k, inputs_v, dict(
            padding_mask=padding_mask, kv_padding_mask=kv_padding_mask,
            seq_lengths=seq_lengths, kv_seq_lengths=kv_seq_lengths,
            segment_ids=segment_ids, kv_segment_ids=kv_segment_ids))
    query = self.query(inputs_q)
    key = self.key(inputs_k)
    value = self.value(inputs_v)
    if self.query_ln is not None:
      query, key = self.query_ln(query), self.key_ln(key)
    dropout_rng = None
    if self.dropout_rate > 0.0:
      deterministic = first_from(
          deterministic, self.deterministic,
          error_msg="no `deterministic` given to MultiHeadAttention (call "
                    "argument or constructor) while dropout_rate > 0")
      if not deterministic:
        rngs = self.rngs if rngs is None else rngs.dropout
        if rngs is None:
          raise ValueError("pass rngs to __call__ when the layer was built "
                           "with keep_rngs=False")
        dropout_rng = rngs()
    x = _attention.attend(query, key, value, is_causal=is_causal, mask=mask,
                          dtype=self.dtype, **self.attention_options,
                          **_attention.dropout_kwargs(
                              self.dropout_rate, deterministic, dropout_rng,
                              self.broadcast_dropout),
                          **padding)
    return self.out(x)
