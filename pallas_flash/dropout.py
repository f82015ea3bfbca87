"""The one definition of the attention-dropout keep mask.

Every backend (the f32 reference, the Pallas-Triton kernels, and any later
kernel) draws the keep bit of score ``(b, n, i, j)`` from this module, so the
forward, the backward (which regenerates the bits instead of storing them)
and the reference agree bit for bit, whatever the tile sizes or the device.

The bit is a counter-based hash (as Philox in FlashAttention's dropout, but
cheaper): int32 multiply / xor / logical-shift rounds, which wrap
identically in XLA, Triton and PTX.  Nearly all of its mixing is done once
per row or column, and one 32-bit word serves two scores, so that a score
costs half a multiply-add, half a shift-add and half a two-lane compare:

* ``seeds(rng, B, N)``: one int32 per (batch row, query head), hashed from the
  PRNG key in XLA before the kernels run (so sharding the batch or the heads
  cannot change the bits: every shard gets its global rows' seeds).
* Query rows pair up as (i, i + 8) within each aligned group of 16 rows
  (``pair_of``): the two rows one thread of a Hopper WGMMA tile holds, in
  the query-major forward / dQ tiles (rows) and in the key-major dK/dV tile
  (columns) alike.  ``row_keys(seed, i)``: per query row the triple
  ``(r, m, shift)``: ``r`` is MurmurHash3's ``fmix32`` of the seeded pair
  index, ``m`` an odd multiplier (``fmix32(r ^ const) | 1``), both shared by
  the pair, and ``shift`` = 16 (i + 8 of the pair) or 0 (i).
  ``col_keys(j)``: ``c_j = fmix32(j * const)``.  Both once per row / column:
  the kernels load them from [B, N, T] / [S] tables hashed in XLA.
* ``keep(row_key, col_key, threshold)``: per (pair, key) the word
  ``w = fold(c_j * m + r)`` with ``fold(x) = x + (x >> 16)`` (a multiply-add
  and a shift-add: IMAD, LEA.HI); the score's 16-bit half
  ``x = (w >> shift) & 0xFFFF``, read as an IEEE half, is compared with a
  half ``t`` (``threshold``): for rate <= 1/2 the score is dropped iff
  ``x < t`` (ordered: NaN patterns are kept), above 1/2 it is kept iff
  ``x < t``.  ``t`` is chosen so that exactly ``round(rate * 2^16)`` (or
  ``round((1 - rate) * 2^16)``) of the 65536 half patterns compare below
  it: P(keep) of a half is within 2^-16 of 1 - rate.  On Hopper one PTX
  ``setp.f16x2`` compares both halves of a word (HSETP2: two predicates).

Why this suffices.  ``fmix32`` has full avalanche, so the pair keys and the
column keys behave as independent uniform words.  Per pair, ``c -> c m +
r`` is a bijection (``m`` odd), so ``c m + r`` is uniform; after ``fold``
the low half is uniform, the high half uniform but for its 0x0000 pattern
(twice as likely: the sum's wrap), and the two are independent but for one
excluded value (the low half never equals the high half minus one), so
P(keep) is within 2^-16 of 1 - rate for either half (the threshold's
rounding included); any three words are
independent (each brings a pair or column key the others lack).  The one
dependency left is the rectangle, through a multiply by a
per-pair-of-pairs odd factor.  ``fold`` is there because ``(c m + r) mod
2^16`` depends only on the keys' low 16 bits: unfolded, two keys whose
column keys share their low bits shared their low halves, and over 100
seeds x 8192^2 neighbouring keys, diagonal neighbours and 1 x 1
rectangles correlated at |rho| <= 6e-5 (up to 4.9 standard errors).
``tools/dropout_stats.py`` checks the keep rate, the per-row and
per-column keep rates (against the binomial), neighbour correlations (row,
column, diagonal, and the two rows of a pair) and the 4-point correlation
of rectangles against independent bits: folded, every statistic lies
within 2.3 standard errors over 100 seeds x 8192^2 at rates 0.5 and 0.1
(``benchmarks/results/dropout_stats_2026-11-24`` at commit 29bf24f).  Not a
cryptographic generator (nor is Philox); the bits are a fixed function of
the key.
``tests/test_bias_dropout.py`` runs the same checks on a smaller mask.

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


def threshold(rate: float) -> tuple[int, bool]:
  """(t, keep_below): the half-precision bit pattern t of ``keep`` and
  whether the halves below t are the kept ones (rate > 1/2) or the dropped
  ones.  Exactly n = round(min(rate, 1 - rate) * 2^16) of the 65536 half
  patterns x have f16(x) < f16(t) (NaN patterns never do)."""
  keep_below = rate > 0.5
  n = int(round((1.0 - rate if keep_below else rate) * 65536.0))
  # Ordered halves: -inf .. -0 (0xFC00 .. 0x8000: 31745 patterns), then
  # +0 (== -0) .. +inf (0x0000 .. 0x7C00).
  if n <= 31744:  # t negative: the n halves more negative than t
    return 0x8000 + 0x7C00 - n, keep_below
  # t = b > 0 positive: the 31745 non-NaN negatives and +0 .. b - 1; 31745
  # itself is not reachable (-0 == +0), so it rounds up
  return max(n, 31746) - 31745, keep_below


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


def pair_of(rows):
  """Query row i -> its pair index: rows i and i + 8 of each aligned group
  of 16 share one (the two rows a WGMMA tile thread holds)."""
  return (rows >> 4) * 8 + (rows & 7)


def half_shift(rows):
  """16 for the second row of a pair (bit 3 of i set), else 0: which half of
  the pair's word is the row's."""
  return ((rows >> 3) & 1) * 16


def row_keys(seed, rows):
  """(additive key, odd multiplier, half shift) per query row ``rows``
  (int32) of one (batch row, head) seed; the two rows of a pair share the
  keys."""
  r = fmix32(seed + pair_of(rows) * _ROW)
  return r, fmix32(r ^ _MUL) | 1, half_shift(rows)


def col_keys(cols):
  """Per key column ``cols`` (int32)."""
  return fmix32(cols * _COL)


def fold(w):
  """w + (w >> 16) (mod 2^32, logical shift): the word's low half then
  depends on all of its bits (one PTX ``mad.hi.u32 w, w, 65536, w``)."""
  return w + _shr(w, 16)


def keep(row_key, col_key, thresh):
  """Keep bits of the scores (row, col): the row's half of the word
  ``fold(col_key * m + r)`` compared as an IEEE half with ``thresh``
  (``threshold``).  ``row_key`` is the ``row_keys`` triple, each broadcast
  against ``col_key``."""
  r, m, shift = row_key
  t, keep_below = thresh
  half = lax.shift_right_logical(fold(col_key * m + r), shift) & 0xFFFF
  x = lax.bitcast_convert_type(half.astype(jnp.uint16), jnp.float16)
  below = x < np.uint16(t).view(np.float16)  # (a literal: Triton takes it)
  return below if keep_below else ~below


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
