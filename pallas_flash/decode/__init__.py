"""Decoding: split-KV ("flash-decoding") attention over a KV cache.

``flash_attention(implementation=None)`` takes the split-KV kernel on a GPU
by itself for few query tokens against a long K/V; the functions here add the
KV cache: append the new tokens and attend, contiguous or paged.  See
``docs/decode.md``.
"""
from pallas_flash.decode.cache import (attend_with_cache,
                                       attend_with_paged_cache, paged_attention)
from pallas_flash.decode.kernel import DecodeConfig

__all__ = ["DecodeConfig", "attend_with_cache", "attend_with_paged_cache",
           "paged_attention"]
