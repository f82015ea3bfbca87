"""Flax integration of pallas_flash.

* :func:`attention_fn` / :func:`make_attention_fn`: a drop-in ``attention_fn``
  for ``flax.linen.MultiHeadDotProductAttention`` and
  ``flax.nnx.MultiHeadAttention``.
* :class:`pallas_flash.flax.linen.MultiHeadAttention` and
  :class:`pallas_flash.flax.nnx.MultiHeadAttention`: layers (GQA / MQA) that
  take causality, padding (masks or lengths) and segment ids without building
  an N x N mask, with the parameter layout of Flax's own attention layers.
"""
from pallas_flash.flax import linen, nnx
from pallas_flash.flax.attention import attention_fn, make_attention_fn

__all__ = ["attention_fn", "make_attention_fn", "linen", "nnx"]
