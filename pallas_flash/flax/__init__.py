"""Flax integration of pallas_flash.

* :func:`attention_fn` / :func:`make_attention_fn`: a drop-in ``attention_fn``
  for ``flax.linen.MultiHeadDotProductAttention`` and
  ``flax.nnx.MultiHeadAttention``.
* :class:`pallas_flash.flax.linen.MultiHeadAttention`: a linen layer that takes
  causality, padding (masks or lengths) and segment ids without building an
  N x N mask.
"""
from pallas_flash.flax import linen
from pallas_flash.flax.attention import attention_fn, make_attention_fn

__all__ = ["attention_fn", "make_attention_fn", "linen"]
