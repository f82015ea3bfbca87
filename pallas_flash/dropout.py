"""The one definition of the attention-dropout keep mask.

Every backend (the f32 reference, the Pallas-Triton kernels, and any later
kernel) draws the keep bit of score ``(b, n, i, j)`` from this module, so the
forward, the backward (which regenerates the bits instead of storing them)
and the reference agree bit for bit, whatever the tile sizes or the device.

The bit is a counter-based hash (as Philox in FlashAttention's dropout, but
cheaper): int32 multiply / xor / logical-shift rounds, which wrap
identically in XLA and in Triton.

* ``seeds(rng, B, N)``: one int32 per (batch row, query head), hashed from the
  PRNG key in XLA before the kernels run (so sharding the batch or the heads
  cannot change the bits: every shard gets its global rows' seeds).
* ``row_keys(seed, i)`` / ``col_keys(j)``: MurmurHash3's ``fmix32`` of the
  query row / key column, once per row or column: the Triton kernels load
  them from [B, N, T] / [S] tables hashed in XLA
  (``triton/tiles.prepare_mask_inputs``), not per tile.
* ``keep(row_key, col_key, threshold)``: per score only
  ``h = ((r ^ c) * A ^ >>15) * B`` (the two multiply rounds of Wellons'
  ``lowbias32``; the top bits it leaves are what the compare reads), kept iff
  ``h`` as a signed int32 is >= ``threshold``: ``P(keep) = 1 - rate`` to
  within 2**-32.  Six integer ops per score (a full ``fmix32`` per score
  costs eleven; this is what the dropout's speed hinges on).

Kept probabilities are scaled by ``1 / (1 - rate)``.  Letters as in
``masks``: B batch, N query heads, T query length, S key length.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


def _i32(c: int):
  """A uint32 constant as the int32 with the same bits."""
  return np.uint32(c).view(np.int32)


_FMIX1, _FMIX2 = _i32(0x85EBCA6B), _i32(0xC2B2AE35)  # MurmurHash3 fmix32
_MIX1, _MIX2 = _i32(0x7FEB352D), _i32(0x846CA68B)  # lowbias32
_ROW, _COL, _HEAD = _i32(0x9E3779B9), _i32(0x632BE5AB), _i32(0x2C1B3C6D)


def _shr(x, n: int):
  return lax.shift_right_logical(x, jnp.full_like(x, n))


def fmix32(h):
  """MurmurHash3's 32-bit finaliser on int32 (a bijection with full avalanche)."""
  h = h ^ _shr(h, 16)
  h = h * _FMIX1
  h = h ^ _shr(h, 13)
  h = h * _FMIX2
  return h ^ _shr(h, 16)


def threshold(rate: float) -> int:
  """Keep iff the int32 hash is >= this: P(keep) = 1 - rate."""
  return min(int(round(rate * 2.0**32)) - 2**31, 2**31 - 1)


def seeds(rng, b: int, n: int, *, broadcast: bool = False):
  """int32 [B, N] per-(batch row, head) seeds from a JAX PRNG key; with
  ``broadcast`` every row and head gets the same seed (one mask for all,
  Flax's ``broadcast_dropout``)."""
  words = lax.bitcast_convert_type(jax.random.bits(rng, (2,), jnp.uint32),
                                   jnp.int32)
  if broadcast:
    return jnp.full((b, n), fmix32(words[0] ^ fmix32(words[1])), jnp.int32)
  bi = jnp.arange(b, dtype=jnp.int32)[:, None]
  ni = jnp.arange(n, dtype=jnp.int32)[None, :]
  return fmix32(fmix32(words[0] ^ bi * _ROW) + (words[1] ^ ni * _HEAD))


def row_keys(seed, rows):
  """Per query row ``rows`` (int32) of one (batch row, head) seed."""
  return fmix32(seed + rows * _ROW)


def col_keys(cols):
  """Per key column ``cols`` (int32)."""
  return fmix32(cols * _COL)


def keep(row_key, col_key, thresh):
  """Keep bits of the scores (row, col); broadcasts ``row_key`` against
  ``col_key``."""
  h = (row_key ^ col_key) * _MIX1
  h = (h ^ _shr(h, 15)) * _MIX2
  return h >= thresh


def keep_mask(seed_array, t: int, s: int, rate: float):
  """Bool [B, N, T, S] keep mask of the [B, N] seeds (the reference's)."""
  rows = jnp.arange(t, dtype=jnp.int32)
  cols = jnp.arange(s, dtype=jnp.int32)
  rk = row_keys(seed_array[:, :, None], rows[None, None, :])  # [B, N, T]
  return keep(rk[..., None], col_keys(cols), threshold(rate))


def dropout_mask(rng, shape, rate: float, *, broadcast: bool = False):
  """The keep mask ``flash_attention(dropout_rate=rate, dropout_rng=rng)`` uses.

  Args:
    rng: the JAX PRNG key passed as ``dropout_rng``.
    shape: ``(B, N, T, S)``: batch, query heads, query and key lengths.
    rate: the dropout rate in [0, 1).
    broadcast: as ``flash_attention``'s ``broadcast_dropout``.

  Returns:
    bool ``[B, N, T, S]``, True where a probability is kept (and scaled by
    ``1 / (1 - rate)``).  ``rate=0`` keeps everything.
  """
  if len(shape) != 4 or not all(isinstance(d, (int, np.integer)) and d >= 1
                                for d in shape):
    raise ValueError(f"shape={shape!r} must be (B, N, T, S) of positive ints")
  if not 0.0 <= rate < 1.0:
    raise ValueError(f"rate={rate!r} must be in [0, 1)")
  b, n, t, s = (int(d) for d in shape)
  return keep_mask(seeds(rng, b, n, broadcast=broadcast), t, s, rate)
