"""The one definition of which (query, key) pairs attend to each other.

Every backend (the f32 reference, the Pallas-Triton kernels, the Mosaic GPU
kernels) builds its masks and its tile-skipping bounds from this module, so the
semantics cannot drift between forward, backward and reference.

Letters: B batch, T query length, S key/value length, N query heads,
K key/value heads, H head dim.  Positions are 0-based token indices.

Query row ``i`` of batch ``b`` sees key ``j`` when all of these hold:

* ``i < q_len[b]`` and ``j < kv_len[b]``           (padding by lengths)
* causal:  ``j <= i + offset``                      (the causal diagonal)
* window ``(left, right)``: ``i + offset - left <= j <= i + offset + right``
* segments: ``q_seg[b, i] == kv_seg[b, j]`` and ``q_seg[b, i] >= 0``
  (negative ids mark padding tokens, which see nothing and are seen by none)
* the dense boolean ``mask[b, n, i, j]`` (broadcast over size-1 dims).

``offset`` aligns the diagonal.  ``"top_left"`` (``offset = 0``) is what
``jax.nn.dot_product_attention`` does; ``"bottom_right"`` (``offset =
kv_len[b] - q_len[b]``) is flash-attn's convention, where the last query sees
the last key: what KV-cache decoding and chunked prefill need.  An optional
per-batch ``diagonal_shift[b]`` is added to it: a call on a (query block, key
block) pair of a longer sequence (ring attention, ``ring.py``) places there
the whole sequence's diagonal, ``offset + q_start - k_start``.

A query row that sees no key is *fully masked*: its output is 0 and its LSE
is reported as ``MASKED_LSE`` (finite), never NaN.
"""
from __future__ import annotations

import dataclasses
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

# Logit given to masked entries inside the kernels (finite, so that
# exp(MASK - MASK) of a fully masked tile never produces NaN; FlashAttention-2
# Alg. 1's running max then erases that tile as soon as a real logit appears).
MASK_VALUE = -0.7 * float(np.finfo(np.float32).max)
# LSE reported for fully masked rows (jax.nn gives about the same value).
MASKED_LSE = MASK_VALUE

CausalAlignment = Literal["top_left", "bottom_right"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class MaskSpec:
  """Static (hashable) part of the mask: what kinds of masking apply."""

  is_causal: bool = False
  bottom_right: bool = False
  window: tuple[int, int] | None = None  # (left, right), both >= 0
  has_segments: bool = False
  # Shape of the dense boolean mask after broadcasting to 4-D, or None.
  # Each dim is 1 (broadcast) or the full B / N / T / S.
  dense_mask_shape: tuple[int, int, int, int] | None = None

  @property
  def needs_elementwise(self) -> bool:
    """True when every tile needs an element-wise mask (not only edge tiles)."""
    return self.has_segments or self.dense_mask_shape is not None


class MaskArrays(NamedTuple):
  """Dynamic (traced) part of the mask. Lengths are always present."""

  q_len: jax.Array  # [B] int32
  kv_len: jax.Array  # [B] int32
  q_segment_ids: jax.Array | None = None  # [B, T] int32
  kv_segment_ids: jax.Array | None = None  # [B, S] int32
  mask: jax.Array | None = None  # [Bm, Nm, Tm, Sm] bool
  # Score terms that travel with the masks to every backend (not masks):
  bias: jax.Array | None = None  # [Bb, Nb, Tb, Sb] float, added to the logits
  alibi_slopes: jax.Array | None = None  # [1 | B, N] float32 (``alibi_bias``)
  dropout_seeds: jax.Array | None = None  # [B, N] int32 (``dropout.seeds``)
  # [B] int32 added to the diagonal offset (``diagonal_offset``), or None:
  diagonal_shift: jax.Array | None = None


def diagonal_offset(spec: MaskSpec, q_len, kv_len, shift=None, xp=jnp):
  """Key index on the causal diagonal of query row 0, plus ``shift``
  (``MaskArrays.diagonal_shift``, None: 0)."""
  offset = kv_len - q_len if spec.bottom_right else xp.zeros_like(q_len)
  return offset if shift is None else offset + shift


def alibi_bias(slopes, q_pos, k_pos, offset):
  """ALiBi (Press et al. 2022) as flash-attn defines it, on our diagonal:
  ``-slope * |i + offset - j|`` (element-wise, broadcasts).

  Computed as ``-sign(slope) * |slope (i + offset) - slope j|`` so that, for
  a tile's row and column vectors, the products are per row / per column
  and each score costs one subtract and one fused multiply-add.
  """
  return alibi_from_terms(slopes, *alibi_terms(slopes, q_pos, k_pos, offset))


def alibi_terms(slopes, q_pos, k_pos, offset, origin=0):
  """``alibi_bias``'s per-row and per-column products, ``slope (i + offset
  - origin)`` and ``slope (j - origin)`` (kernels compute them on a tile's
  position vectors and broadcast them).  Any key ``origin`` gives the same
  bias; one near the tile keeps the f32 products small and exact."""
  f32 = lambda x: jnp.asarray(x).astype(jnp.float32)
  return slopes * f32(q_pos + offset - origin), slopes * f32(k_pos - origin)


def alibi_from_terms(slopes, row_term, col_term):
  """``alibi_bias`` from ``alibi_terms`` broadcast to the scores' shape."""
  return -jnp.sign(slopes) * jnp.abs(row_term - col_term)


def alibi_side(q_first, q_last, k_first, k_last, offset):
  """Where a block of rows [q_first, q_last] x keys [k_first, k_last] lies
  against the diagonal: 1 if ``j <= i + offset`` for every pair in it (as
  for every visible pair under causal masking), -1 if ``j >= i + offset``
  for every pair, 0 if the diagonal crosses it (int32, broadcasts)."""
  left = k_last <= q_first + offset
  right = k_first >= q_last + offset
  return jnp.where(left, 1, jnp.where(right, -1, 0)).astype(jnp.int32)


def alibi_linear(side, row_term, col_term):
  """``alibi_bias`` on a block with ``alibi_side`` == side (+-1) is linear:
  ``row_part + col_part`` with the two returned here (per row, per column,
  from ``alibi_terms``), since there ``i + offset - j`` has one sign: so
  the kernels fold the bias into per-row terms and the score GEMM's
  accumulator init instead of computing it per score.  side = 0 (the
  diagonal crosses the block) gives zeros: the block needs
  ``alibi_from_terms``."""
  side = jnp.asarray(side).astype(jnp.float32)
  return -side * row_term, side * col_term


def _span(spec: MaskSpec, pos, q_len, kv_len, offset, kv_major: bool,
          zero, xp=jnp):
  """[lo, hi): the keys that query row ``pos`` may see (``kv_major``: the
  query rows that may see key ``pos``) by the causal / window / length
  rules; empty where hi <= lo.  Whether ``pos`` itself is a real row is
  left to the caller.  lo and hi never decrease as ``pos`` grows.  ``zero``:
  the lowest lo, in the shape lo takes without causal / window rules.
  ``xp``: ``jnp``, or ``np`` for static Python ints (ring.py's plan)."""
  lo = zero
  if kv_major:  # j = pos: i >= j - offset (causal), the window's two sides
    hi = q_len
    if spec.is_causal:
      lo = xp.maximum(lo, pos - offset)
    if spec.window is not None:
      left, right = spec.window
      lo = xp.maximum(lo, pos - offset - right)
      hi = xp.minimum(hi, pos - offset + left + 1)
  else:  # i = pos: j <= i + offset (causal), the window's two sides
    hi = kv_len
    if spec.is_causal:
      hi = xp.minimum(hi, pos + offset + 1)
    if spec.window is not None:
      left, right = spec.window
      lo = xp.maximum(lo, pos + offset - left)
      hi = xp.minimum(hi, pos + offset + right + 1)
  return lo, hi


def visible_span(spec: MaskSpec, pos, q_len, kv_len, offset,
                 kv_major: bool = False):
  """Causal / window / length part of the mask, per row: (lo, n) such that
  query row ``pos`` sees keys lo .. lo + n - 1 (``kv_major``: key ``pos`` is
  seen by query rows lo .. lo + n - 1); n = 0 where it sees (is seen by)
  none: ``0 <= other - lo < n`` holds exactly where ``position_visible``
  does.  A kernel computes (lo, n) once per row of a tile and then one
  unsigned compare per element.  The kv-major form is the same rule solved
  for i."""
  zero, own = jnp.zeros_like(pos), pos < (kv_len if kv_major else q_len)
  lo, hi = _span(spec, pos, q_len, kv_len, offset, kv_major, zero)
  return lo, jnp.where(own, jnp.maximum(hi - lo, 0), 0)


def position_visible(spec: MaskSpec, q_pos, k_pos, q_len, kv_len, offset):
  """Causal / window / length part of the mask, element-wise (broadcasts):
  the rules of the module docstring as compares (``_span`` is them solved
  per row; tests/test_attention.py holds the two equal).  Not written as
  ``visible_span``'s (lo, n) per element: on the d128 forward's masked tiles
  that took twice the integer ops and ran 2-4% slower (run 132, H100,
  causal S4k / S16k forward 535 / 598 against 548 / 623 TFLOP/s)."""
  ok = (q_pos < q_len) & (k_pos < kv_len)
  if spec.is_causal:
    ok &= k_pos <= q_pos + offset
  if spec.window is not None:
    left, right = spec.window
    ok &= (k_pos >= q_pos + offset - left) & (k_pos <= q_pos + offset + right)
  return ok


def segment_visible(q_seg, kv_seg):
  """Segment part of the mask: same segment, and not a padding token."""
  return (q_seg == kv_seg) & (q_seg >= 0)


def kv_bounds(spec: MaskSpec, q_start, q_end, kv_len, offset, xp=jnp):
  """Keys that query rows [q_start, q_end) may see, from positions alone.

  Returns (lo, hi, full_lo, full_hi): keys outside [lo, hi) are invisible to
  every row; keys inside [full_lo, full_hi) are visible to every row (up to
  segments and the dense mask), so tiles there need no position mask.  The
  rows' spans (``_span``) only move right as the row grows, so their union
  runs from the first row's lo to the last row's hi, and their intersection
  from the last row's lo to the first row's hi.
  """
  span = lambda row: _span(spec, row, None, kv_len, offset, False,
                           xp.zeros_like(kv_len), xp)
  (lo, full_hi), (full_lo, hi) = span(q_start), span(q_end - 1)
  return lo, hi, full_lo, full_hi


def block_visible(spec: MaskSpec, q_len, kv_len, offset, xp=jnp):
  """Whether query rows [0, q_len) and keys [0, kv_len) with the diagonal
  at ``offset`` hold a pair visible by the causal / window / length rules
  (``kv_bounds``: the rows' spans are consecutive and move right one key a
  row, so their union [lo, hi) is one interval).  Ring attention skips a
  (query share, key share) block where this is False (``offset`` then
  includes the block's ``q_start - k_start``); ``xp=np`` decides it for
  Python ints."""
  lo, hi, _, _ = kv_bounds(spec, 0, q_len, kv_len, offset, xp)
  return (q_len > 0) & (hi > lo)


def q_bounds(spec: MaskSpec, k_start, k_end, q_len, kv_len, offset, xp=jnp):
  """Query rows that may see keys [k_start, k_end): the transpose of kv_bounds.

  Returns (lo, hi, full_lo, full_hi) over query rows; rows in
  [full_lo, full_hi) see every key of the block (which must lie below kv_len).
  """
  span = lambda key: _span(spec, key, q_len, None, offset, True,
                           xp.zeros_like(q_len), xp)
  (lo, full_hi), (full_lo, hi) = span(k_start), span(k_end - 1)
  return lo, hi, full_lo, xp.where(k_end <= kv_len, full_hi, 0)


def item_bounds(spec: MaskSpec, start, rows: int, q_len, kv_len, offset,
                kv_major: bool = False, xp=jnp):
  """``kv_bounds`` / ``q_bounds`` of the work items of ``rows`` rows from
  ``start``: by default query rows (a q tile; its rows past q_len are left
  out: the kernels give them P = 0 anyway), with ``kv_major`` key rows (a kv
  tile of the dK/dV pass; all its rows: keys past kv_len are no padding
  there, so such an item gets no full query tiles and every step is
  masked).  ``xp``: ``jnp``, or ``np`` for static arrays (the persistent
  schedule's ``tile_steps``)."""
  if kv_major:
    return q_bounds(spec, start, start + rows, q_len, kv_len, offset, xp)
  return kv_bounds(spec, start, xp.minimum(start + rows, q_len), kv_len,
                   offset, xp)


def tile_range(lo, hi, full_lo, full_hi, block: int, xp=jnp):
  """Position bounds -> tile bounds.

  Returns (first, last_excl, full_first, full_last_excl) tile indices with
  first <= full_first <= full_last_excl <= last_excl: tiles in
  [full_first, full_last_excl) need no position mask, the rest of
  [first, last_excl) do.
  """
  first = xp.maximum(lo, 0) // block
  last = xp.maximum((hi + block - 1) // block, first)
  full_first = xp.clip((full_lo + block - 1) // block, first, last)
  full_last = xp.clip(full_hi // block, full_first, last)
  return first, last, full_first, full_last


def segment_tile_ranges(segment_ids, block: int):
  """Per-tile [min, max] of the non-negative segment ids: [B, num_tiles] x 2.

  Two tiles whose ranges do not overlap share no segment, so their whole
  block of the score matrix is masked and the kernels skip it.  A tile of
  padding only gets the empty range (big, -1).
  """
  b, n = segment_ids.shape
  num_tiles = -(-n // block)
  pad = num_tiles * block - n
  ids = jnp.pad(segment_ids, ((0, 0), (0, pad)), constant_values=-1)
  ids = ids.reshape(b, num_tiles, block)
  big = jnp.iinfo(jnp.int32).max
  lo = jnp.min(jnp.where(ids >= 0, ids, big), axis=-1).astype(jnp.int32)
  hi = jnp.max(ids, axis=-1).astype(jnp.int32)
  return lo, hi


def dense_mask(spec: MaskSpec, arrays: MaskArrays, t: int, s: int):
  """The whole mask as a [B, 1 or N, T, S] boolean array (reference only)."""
  q_pos = jnp.arange(t, dtype=jnp.int32)[None, :, None]
  k_pos = jnp.arange(s, dtype=jnp.int32)[None, None, :]
  q_len = arrays.q_len[:, None, None]
  kv_len = arrays.kv_len[:, None, None]
  shift = arrays.diagonal_shift
  offset = diagonal_offset(spec, q_len, kv_len,
                           None if shift is None else shift[:, None, None])
  ok = position_visible(spec, q_pos, k_pos, q_len, kv_len, offset)
  if arrays.q_segment_ids is not None:
    ok &= segment_visible(arrays.q_segment_ids[:, :, None],
                          arrays.kv_segment_ids[:, None, :])
  ok = ok[:, None]  # [B, 1, T, S]
  if arrays.mask is not None:
    ok = ok & arrays.mask
  return ok
