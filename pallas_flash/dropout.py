"""The one definition of the attention-dropout keep mask.

Every backend (the f32 reference, the Pallas-Triton kernels, and any later
kernel) draws the keep bit of score ``(b, n, i, j)`` from this module, so the
forward, the backward (which regenerates the bits instead of storing them)
and the reference agree bit for bit, whatever the tile sizes or the device.

The bit is a counter-based hash (as Philox in FlashAttention's dropout, but
cheaper): int32 multiply / xor / logical-shift rounds, which wrap
identically in XLA and in Triton.  Nearly all of its mixing is done once per
row or column, so that a score costs two integer ops (a multiply-add and a
compare):

* ``seeds(rng, B, N)``: one int32 per (batch row, query head), hashed from the
  PRNG key in XLA before the kernels run (so sharding the batch or the heads
  cannot change the bits: every shard gets its global rows' seeds).
* ``row_keys(seed, i)``: per query row a pair ``(r_i, m_i)``: ``r_i`` is
  MurmurHash3's ``fmix32`` of the seeded row, ``m_i`` an odd multiplier
  (``fmix32(r_i ^ const) | 1``).  ``col_keys(j)``: ``c_j = fmix32(j * const)``.
  Both once per row / column: the Triton kernels load them from [B, N, T]
  / [S] tables hashed in XLA (``triton/tiles.prepare_mask_inputs``), not
  per tile.
* ``keep(row_key, col_key, threshold)``: per score ``h = c_j * m_i + r_i``
  (one integer multiply-add, IMAD), kept iff ``h`` as a signed int32 is >=
  ``threshold`` (compare): ``P(keep) = 1 - rate`` to within 2**-32.

Why two ops suffice.  ``fmix32`` has full avalanche, so the row keys and the
column keys behave as independent uniform words.  Per row, ``c -> c m_i +
r_i`` is a bijection (``m_i`` odd), so ``h`` is uniform; any three scores'
``h`` are independent (each brings a row or column key the others lack), so
single bits, pairs (neighbours in a row, in a column, anywhere) and triples
are exactly as independent as the keys.  The one dependency left is the
rectangle: ``h_i'j' = h_i'j + (h_ij' - h_ij) * m_i' / m_i`` (mod 2**32),
through a multiply by a per-row-pair odd factor, whose top bits (which the
compare reads) depend on every bit of the difference.  With xor in place of
the add, the rectangle's dependency is linear (``x_i'j' = x_ij ^ x_ij' ^
x_i'j``) until the per-row multiply; both forms pass the checks below, the
multiply-add in one op fewer.  ``benchmarks/dropout_stats.py`` (rates 0.1
and 0.5; 10 and 30 seeds x 8192^2 masks): the keep rate, the per-row and
per-column keep rates (against the binomial), neighbour correlations (row,
column, diagonal) and the 4-point correlation of rectangles of side 1, 2,
64 and 1000 all lie within 3 standard errors of independent bits (largest
|z|: 2.19 over 10 seeds, 1.75 over 30).  A variant with one multiplier
shared by all rows, tried first, failed these checks (per-row keep rates
over-dispersed, rectangle corners correlated, at up to 4.5 standard
errors), hence ``m_i``.  Not a
cryptographic generator (nor is Philox); the bits are a fixed function of
the key.  ``tests/test_bias_dropout.py`` runs the same checks on a smaller
mask.

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
_ROW, _COL, _HEAD = _i32(0x9E3779B9), _i32(0x632BE5AB), _i32(0x2C1B3C6D)
_MUL = _i32(0x7FEB352D)  # salts the per-row multipliers


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
  """(additive key, odd multiplier) per query row ``rows`` (int32) of one
  (batch row, head) seed."""
  r = fmix32(seed + rows * _ROW)
  return r, fmix32(r ^ _MUL) | 1


def col_keys(cols):
  """Per key column ``cols`` (int32)."""
  return fmix32(cols * _COL)


def keep(row_key, col_key, thresh):
  """Keep bits of the scores (row, col): a multiply-add and a compare per
  score.  ``row_key`` is the ``row_keys`` pair, each broadcast against
  ``col_key``."""
  r, m = row_key
  return col_key * m + r >= thresh


def keep_mask(seed_array, t: int, s: int, rate: float):
  """Bool [B, N, T, S] keep mask of the [B, N] seeds (the reference's)."""
  rows = jnp.arange(t, dtype=jnp.int32)
  cols = jnp.arange(s, dtype=jnp.int32)
  rk = row_keys(seed_array[:, :, None], rows[None, None, :])  # [B, N, T] each
  return keep(tuple(x[..., None] for x in rk), col_keys(cols), threshold(rate))


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
