"""Tile-level pieces shared by the Pallas-Triton forward and backward kernels:
operand specs, masked tile loads, scaled (soft-capped) scores, the additive
score terms (bias, ALiBi), the dropout keep bits (``dropout``) and the
element-wise mask of one [block_q, block_k] tile, built from ``masks``.

Scores live in the log2 domain (FlashAttention-2 kernels' exp2 trick): the
kernels compute ``s2 = log2(e) * scale * q k^T`` so that ``exp2(s2 - m2)``
equals ``exp(s - m)``.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from pallas_flash import dropout, masks

LOG2E = math.log2(math.e)
LN2 = math.log(2.0)


class TileInputs(NamedTuple):
  """Refs of the optional mask and score-term inputs of one (batch, head)
  program (kernels take them as ``*refs`` after q, k, v, before outputs)."""

  lens: object  # [4] int32: q_len, kv_len, diagonal offset, 0 (pad)
  q_seg: object | None  # [T] int32
  kv_seg: object | None  # [S] int32
  kv_seg_lo: object | None  # [num_k_tiles] int32 per-tile segment range
  kv_seg_hi: object | None
  q_seg_lo: object | None  # [num_q_tiles]
  q_seg_hi: object | None
  mask: object | None  # [Tm, Sm] int8
  bias: object | None  # [Tb, Sb] (or [G, Tb, Sb]) in the bias dtype
  slopes: object | None  # [N] float32 ALiBi slopes of this batch row
  drop_row_add: object | None  # [T] (or [G, T]) int32: the ``dropout.row_keys``
  drop_row_mul: object | None  # pair of the program's query head(s)
  drop_cols: object | None  # [S] int32 ``dropout.col_keys``


def _plane_spec(shape, q_head_block: int | None):
  """BlockSpec of a [Bm|1, Nm|1, Tm, Sm] array: one program's plane (or
  ``q_head_block`` query heads of it); size-1 dims broadcast."""
  bm, nm, tm, sm = shape
  index = lambda i, b, h: (b if bm > 1 else 0, h if nm > 1 else 0, 0, 0)
  if q_head_block is None or nm == 1:
    return pl.BlockSpec((None, None, tm, sm), index)
  return pl.BlockSpec((None, q_head_block, tm, sm), index)


def prepare_mask_inputs(arrays: masks.MaskArrays, spec: masks.MaskSpec, *,
                        t: int, s: int, block_q: int, block_k: int,
                        q_head_block: int | None):
  """Kernel operands and BlockSpecs for the mask and score-term inputs.

  Grid convention of every kernel here: ``(tile, batch, head)``.  When
  ``q_head_block`` is None the program's head is a query head (``dense mask``
  indexed by it); otherwise the program covers ``q_head_block`` query heads
  of one kv head and the dense mask is indexed per query head in the kernel.
  """
  q_len = jnp.clip(arrays.q_len, 0, t)
  kv_len = jnp.clip(arrays.kv_len, 0, s)
  offset = masks.diagonal_offset(spec, q_len, kv_len, arrays.diagonal_shift)
  lens = [q_len, kv_len, offset, jnp.zeros_like(q_len)]  # 4: a power of two
  operands = [jnp.stack(lens, axis=1).astype(jnp.int32)]
  specs = [pl.BlockSpec((None, 4), lambda i, b, h: (b, 0))]
  if spec.has_segments:
    q_lo, q_hi = masks.segment_tile_ranges(arrays.q_segment_ids, block_q)
    k_lo, k_hi = masks.segment_tile_ranges(arrays.kv_segment_ids, block_k)
    operands += [arrays.q_segment_ids, arrays.kv_segment_ids, k_lo, k_hi, q_lo, q_hi]
    specs += [pl.BlockSpec((None, t), lambda i, b, h: (b, 0)),
              pl.BlockSpec((None, s), lambda i, b, h: (b, 0))]
    specs += [pl.BlockSpec((None, x.shape[1]), lambda i, b, h: (b, 0))
              for x in (k_lo, k_hi, q_lo, q_hi)]
  else:
    operands += [None] * 6
    specs += [None] * 6
  if spec.dense_mask_shape is not None:
    operands.append(arrays.mask.astype(jnp.int8))
    specs.append(_plane_spec(spec.dense_mask_shape, q_head_block))
  else:
    operands.append(None)
    specs.append(None)
  bias = arrays.bias
  operands.append(bias)
  specs.append(None if bias is None else _plane_spec(bias.shape, q_head_block))
  x = arrays.alibi_slopes  # [1 | B, N]
  operands.append(x)
  specs.append(None if x is None else pl.BlockSpec(
      (None, x.shape[1]), lambda i, b, h, bx=x.shape[0]: (b if bx > 1 else 0, 0)))
  seeds = arrays.dropout_seeds  # [B, N]
  if seeds is None:
    return operands + [None] * 3, specs + [None] * 3
  # The keys of dropout.keep, hashed once per row / column here in XLA
  # (2 B N T + S words), not per tile in the kernels' loops.
  rows = dropout.row_keys(seeds[:, :, None], jnp.arange(t, dtype=jnp.int32))
  operands += [*rows[:2], dropout.col_keys(jnp.arange(s, dtype=jnp.int32))]
  row_spec = pl.BlockSpec((None, q_head_block, t), lambda i, b, h: (b, h, 0))
  specs += [row_spec, row_spec, pl.BlockSpec((s,), lambda i, b, h: (0,))]
  return operands, specs


def query_tile(spec: masks.MaskSpec, step, num_tiles):
  """The query tile of grid step ``step``: with causal masking the last
  (longest) tiles run first, so the heaviest programs start early.  Used by
  the kernels and by their output index maps alike."""
  return num_tiles - 1 - step if spec.is_causal else step


class QueryTile(NamedTuple):
  """A query-major program's tile (grid axis 0) and its mask lengths."""

  index: object  # tile number, longest first when causal
  start: object  # first row
  end: object  # one past the last row before q_len
  q_len: object
  kv_len: object
  offset: object  # masks.diagonal_offset of this batch row


def program_query_tile(spec: masks.MaskSpec, lens_ref,
                       block_q: int) -> QueryTile:
  """The forward's and the dQ kernel's query tile (grid axis 0)."""
  index = query_tile(spec, pl.program_id(0), pl.num_programs(0))
  start = index * block_q
  q_len, kv_len, offset = lens_ref[0], lens_ref[1], lens_ref[2]
  end = jnp.minimum(start + block_q, q_len)
  return QueryTile(index, start, end, q_len, kv_len, offset)


def load_rows(ref, start, block: int, limit: int, head_dim: int, head=None):
  """Rows [start, start + block) of a [rows, Hp] (or [rows, G, Hp]) ref, 0 outside.

  ``head`` picks the head of a [rows, G, Hp] ref (Triton lowering takes one
  indexer per load, so the head is folded into the same index).
  """
  rows = start + jnp.arange(block)
  head_dim_padded = ref.shape[-1]
  mask = _row_col_mask(rows, block, limit, head_dim, head_dim_padded)
  if head is None:
    idx = (pl.ds(start, block), slice(None))
  else:
    idx = (pl.ds(start, block), head, slice(None))
  if mask is None:
    return plgpu.load(ref.at[idx])
  return plgpu.load(ref.at[idx], mask=mask, other=0.0)


def _row_col_mask(rows, block, limit, head_dim, head_dim_padded):
  """Bounds mask of a [block, Hp] tile; None when statically in bounds
  (every tile full and H a power of two), which keeps loads unpredicated."""
  need_rows = limit % block != 0
  need_cols = head_dim != head_dim_padded
  if not (need_rows or need_cols):
    return None
  mask = jnp.ones((block, head_dim_padded), jnp.bool_)
  if need_rows:
    mask &= (rows < limit)[:, None]
  if need_cols:
    mask &= (jnp.arange(head_dim_padded) < head_dim)[None, :]
  return mask


def load_vec(ref, start, block: int, limit: int, other, head=None):
  """Entries [start, start + block) of a [n] (or [G, n]) ref, ``other`` outside."""
  idx = start + jnp.arange(block)
  sl = pl.ds(start, block) if head is None else (head, pl.ds(start, block))
  return plgpu.load(ref.at[sl], mask=idx < limit, other=other)


def store_rows(ref, value, start, block: int, limit: int, head_dim: int):
  """Stores a [block, Hp] tile into a blocked [block, Hp] output ref."""
  rows = start + jnp.arange(block)
  mask = _row_col_mask(rows, block, limit, head_dim, ref.shape[-1])
  plgpu.store(ref, value.astype(ref.dtype), mask=mask)


def dot(a, b, *, trans_a=False, trans_b=False):
  """Tensor-core dot with f32 accumulation; exact f32 (no tf32) for f32 inputs."""
  exact = a.dtype == jnp.float32
  return plgpu.dot(a, b, trans_a=trans_a, trans_b=trans_b,
                   allow_tf32=False if exact else None)


def scores(a, b, *, scale: float, cap: float | None):
  """log2-domain scores of a tile and, with a soft-cap, tanh(scale*ab^T/cap).

  ``scores(q, k)`` gives the [block_q, block_k] tile, ``scores(k, q)`` its
  transpose.  Returns (s2 f32, tanh or None) where
  s2 = log2(e) * (cap * tanh(scale * a b^T / cap)  or  scale * a b^T).
  """
  qk = dot(a, b, trans_b=True)
  if cap is None:
    return qk * (scale * LOG2E), None
  th = jnp.tanh(qk * (scale / cap))
  return th * (cap * LOG2E), th


def tile_visible(spec: masks.MaskSpec, inputs: TileInputs, *, q_start, k_start,
                 block_q: int, block_k: int, t: int, s: int, q_len, kv_len,
                 offset, q_seg=None, head=None, key_major: bool = False):
  """Element-wise mask of the [block_q, block_k] tile at (q_start, k_start).

  Keys past S are always masked (tails); the rest is ``masks``' definition.
  ``q_seg`` is the already loaded [block_q] query segment ids (or None);
  ``head`` selects the query head of a multi-head dense-mask block;
  ``key_major`` returns the transposed [block_k, block_q] mask.
  """
  q_idx = q_start + jnp.arange(block_q)
  k_idx = k_start + jnp.arange(block_k)
  rows, cols = ((q_idx[None, :], k_idx[:, None]) if key_major
                else (q_idx[:, None], k_idx[None, :]))
  ok = masks.position_visible(spec, rows, cols, q_len, kv_len, offset)
  if spec.has_segments:
    kv_seg = load_vec(inputs.kv_seg, k_start, block_k, s, -1)
    ok &= (masks.segment_visible(q_seg[None, :], kv_seg[:, None]) if key_major
           else masks.segment_visible(q_seg[:, None], kv_seg[None, :]))
  if spec.dense_mask_shape is not None:
    m = load_plane(inputs.mask, spec.dense_mask_shape[2:], q_start=q_start,
                   k_start=k_start, block_q=block_q, block_k=block_k, t=t,
                   s=s, head=head, key_major=key_major)
    ok &= m != 0
  return ok


def load_plane(ref, plane_shape, *, q_start, k_start, block_q: int,
               block_k: int, t: int, s: int, head=None,
               key_major: bool = False):
  """The [block_q|1, block_k|1] tile at (q_start, k_start) of a [Tm, Sm] (or
  [G, Tm, Sm], ``head`` picking G) dense mask or bias ref, 0 out of bounds;
  size-1 (broadcast) dims are read as length-1 slices.  ``key_major``
  returns its transpose."""
  tm, sm = plane_shape
  q_idx = q_start + jnp.arange(block_q)
  k_idx = k_start + jnp.arange(block_k)
  q_rows = pl.ds(q_start, block_q) if tm > 1 else pl.ds(0, 1)
  k_cols = pl.ds(k_start, block_k) if sm > 1 else pl.ds(0, 1)
  in_bounds = (((q_idx < t)[:, None] if tm > 1 else True)
               & ((k_idx < s)[None, :] if sm > 1 else True))
  idx = (q_rows, k_cols) if head is None else (head, q_rows, k_cols)
  if in_bounds is True:  # a [1, 1] plane: always in bounds
    x = plgpu.load(ref.at[idx])
  else:
    x = plgpu.load(ref.at[idx], mask=in_bounds, other=0)  # [bq|1, bk|1]
  return x.T if key_major else x


def add_score_terms(s2, inputs: TileInputs, *, q_start, k_start, t: int,
                    s: int, offset, q_head, head=None, key_major=False):
  """A log2-domain score tile plus log2(e) * (ALiBi + bias).

  ``s2`` is [block_q, block_k] (or its transpose with ``key_major``);
  ``q_head`` is the program's query head (slopes), ``head`` the head inside
  a multi-head bias block.  A -inf bias is clamped to ``masks.MASK_VALUE``
  (masked, without inf - inf = NaN), as in ``reference``.
  """
  block_q, block_k = s2.shape[::-1] if key_major else s2.shape
  if inputs.slopes is not None:
    q_pos = q_start + jnp.arange(block_q)
    k_pos = k_start + jnp.arange(block_k)
    rows, cols = ((q_pos[None, :], k_pos[:, None]) if key_major
                  else (q_pos[:, None], k_pos[None, :]))
    s2 = s2 + masks.alibi_bias(inputs.slopes[q_head] * LOG2E, rows, cols, offset)
  if inputs.bias is not None:
    shape = inputs.bias.shape[-2:]
    b = load_plane(inputs.bias, shape, q_start=q_start, k_start=k_start,
                   block_q=block_q, block_k=block_k, t=t, s=s, head=head,
                   key_major=key_major)
    s2 = jnp.maximum(s2 + b.astype(jnp.float32) * LOG2E, masks.MASK_VALUE)
  return s2


def dropout_row_keys(inputs: TileInputs, q_start, block_q: int, t: int,
                     head=None):
  """The ``dropout.row_keys`` triple of query rows [q_start, q_start +
  block_q) (of query head ``head`` of a [G, T] block): the loaded pair keys
  and the rows' half shifts."""
  rows = q_start + jnp.arange(block_q, dtype=jnp.int32)
  return (*(load_vec(ref, q_start, block_q, t, 0, head=head)
            for ref in (inputs.drop_row_add, inputs.drop_row_mul)),
          dropout.half_shift(rows))


def dropout_col_keys(inputs: TileInputs, k_start, block_k: int, s: int):
  """The ``dropout.col_keys`` of key columns [k_start, k_start + block_k)."""
  return load_vec(inputs.drop_cols, k_start, block_k, s, 0)


def dropout_keep(rk, ck, rate: float, *, key_major=False):
  """The ``dropout.keep`` bits of the [block_q, block_k] tile (or its
  transpose with ``key_major``) of row keys ``rk`` (``dropout_row_keys``)
  and column keys ``ck``: the same bits whatever the tiling."""
  if key_major:
    return dropout.keep(tuple(x[None, :] for x in rk), ck[:, None],
                        dropout.threshold(rate))
  return dropout.keep(tuple(x[:, None] for x in rk), ck[None, :],
                      dropout.threshold(rate))


def mask_scores(s2, spec: masks.MaskSpec, inputs: TileInputs,
                tile: QueryTile, k_start, *, block_k: int, t: int, s: int,
                q_seg=None):
  """A query-major program's [block_q, block_k] score tile with the entries
  ``tile_visible`` rejects set to ``masks.MASK_VALUE``."""
  ok = tile_visible(spec, inputs, q_start=tile.start, k_start=k_start,
                    block_q=s2.shape[0], block_k=block_k, t=t, s=s,
                    q_len=tile.q_len, kv_len=tile.kv_len, offset=tile.offset,
                    q_seg=q_seg)
  return jnp.where(ok, s2, masks.MASK_VALUE)


def segments_overlap(lo_a, hi_a, lo_b, hi_b):
  """Whether two tiles' [lo, hi] segment-id ranges can share a segment."""
  return (lo_a <= hi_b) & (lo_b <= hi_a)
