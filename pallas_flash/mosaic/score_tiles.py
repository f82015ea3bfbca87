"""What joins a score tile in the Mosaic GPU kernels (forward and backward),
one definition each: the element-wise mask of an edge tile (``masks``
semantics: positions, segment ids, a dense mask), ALiBi computed in the kernel
(``AlibiTile``), dropout's keep bits (``DropoutTiles``, bits from
``pallas_flash.dropout``) and an additive bias read through its own TMA ring
(``BiasRing``).  The pipeline they run in is ``pipeline.py``.
"""
from __future__ import annotations

import math

from jax import lax
import jax.experimental.pallas as pl
import jax.experimental.pallas.mosaic_gpu as plgpu
from jax.experimental.mosaic import gpu as mgpu
from jax.experimental.mosaic.gpu import utils as mgpu_utils
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import arith as arith_dialect
from jaxlib.mlir.dialects import math as math_dialect
from jaxlib.mlir.dialects import vector as vector_dialect
import jax.numpy as jnp
import numpy as np

from pallas_flash import dropout, masks
from pallas_flash.mosaic.pipeline import COL, ROW, WGMMA, Item

LOG2E = math.log2(math.e)  # the kernels' softmax runs in base 2
_BIAS_TILE = (8, 64)  # the bias ring's smem tiling (2-byte, 128-byte swizzle)


def mask_refs(spec: masks.MaskSpec, refs):
  """(q_seg, kv_seg, dense mask, the rest of refs): the optional mask
  operands at the front of a kernel's remaining refs."""
  refs = list(refs)
  q_seg = kv_seg = dense = None
  if spec.has_segments:
    q_seg, kv_seg = refs.pop(0), refs.pop(0)
  if spec.dense_mask_shape is not None:
    dense = refs.pop(0)  # [Bm, Nm, Tp, Sp] int8
  return q_seg, kv_seg, dense, refs


def segment_ids(ref, b, rows, shape, dim: int):
  """Segment ids of positions ``rows`` of batch row b ([B, T] or [B, S]
  int32), broadcast to a score tile of ``shape`` along which they run on
  axis ``dim``."""
  ids = plgpu.load(ref.at[b, rows], layout=ROW if dim == 0 else COL,
                   optimized=False)
  return lax.broadcast_in_dim(ids, shape, [dim])


def dense_tile(mask_ref, b, n, rows, cols):
  """The [rows, cols] tile of an int8 dense mask [Bm, Nm, ., .] for batch
  row b and head n (size-1 dims broadcast)."""
  mb = b if mask_ref.shape[0] > 1 else 0
  mn = n if mask_ref.shape[1] > 1 else 0
  return mask_ref.at[mb, mn, rows, cols]


def tile_visible(spec: masks.MaskSpec, item: Item, row_start, col_start,
                 shape, kv_major: bool, segments=None, dense=None,
                 per_row: bool = True):
  """Element-wise mask of one [rows, cols] score tile, ``masks`` semantics:
  rows from ``row_start`` are queries (keys with ``kv_major``: the dK/dV
  kernel's key-major tiles), columns from ``col_start`` the other axis.
  Positions, ``per_row``: per row the span (lo, n) of the columns it sees
  (``masks.visible_span``, two values per thread), then per element one
  unsigned compare, (col - lo) < n; else ``masks.position_visible`` on the
  tile's positions (three compares per element).  Run 120 (H100, causal,
  bitwise equal): per row the backward gains 2-9% (d64 S4k 9%) and the d64
  forward 3-6%; the d128 forward loses 1.5-3% (run 124), so it keeps the
  compares.
  Then optionally ``segments()`` -> (q_seg, kv_seg) broadcast to the tile
  and ``dense()`` -> the dense mask's tile ref (``dense_tile``, read in the
  WGMMA layout), loaded only once needed."""
  iota = lambda dim: plgpu.broadcasted_iota(jnp.int32, shape, dim,
                                            layout=WGMMA)
  if per_row:
    rows = row_start + plgpu.broadcasted_iota(jnp.int32, shape[:1], 0,
                                              layout=ROW)
    lo, n = masks.visible_span(spec, rows, item.q_len, item.kv_len,
                               item.offset, kv_major)
    bcast = lambda x: plgpu.layout_cast(lax.broadcast_in_dim(x, shape, [0]),
                                        WGMMA)
    d = col_start + iota(1) - bcast(lo)
    ok = d.astype(jnp.uint32) < bcast(n).astype(jnp.uint32)
  else:
    rows, cols = row_start + iota(0), col_start + iota(1)
    q_pos, k_pos = (cols, rows) if kv_major else (rows, cols)
    ok = masks.position_visible(spec, q_pos, k_pos, item.q_len, item.kv_len,
                                item.offset)
  if segments is not None:
    ok = ok & masks.segment_visible(*segments())
  if dense is not None:
    ok = ok & (plgpu.load(dense(), layout=WGMMA, optimized=False) != 0)
  return ok


def query_tile_visible(spec: masks.MaskSpec, item: Item, b, n, q_base, ki,
                       shape, q_seg, kv_seg_ref, mask_ref,
                       per_row: bool = True):
  """``tile_visible`` of a query-major [block_q, block_kv] score tile: rows
  from q_base, keys of kv tile ki (the forward and the dQ kernel); q_seg is
  the rows' segment ids broadcast to the tile (``segment_ids``)."""
  bq, bk = shape
  k_rows = lambda: pl.ds(ki * bk, bk)
  segs = dense = None
  if spec.has_segments:
    segs = lambda: (q_seg, segment_ids(kv_seg_ref, b, k_rows(), shape, 1))
  if mask_ref is not None:
    dense = lambda: dense_tile(mask_ref, b, n, pl.ds(q_base, bq), k_rows())
  return tile_visible(spec, item, q_base, ki * bk, shape, False, segs, dense,
                      per_row)


def scaled_key_positions(slope, start, n: int):
  """slope * f32(start + [0, n)) as a key-axis vector (``COL``), one FFMA a
  value: in the WGMMA layout a thread holds keys 8k + 2p + e of register k
  (p = lane % 4, e the vector element), so u = slope * f32(start + 2p) once
  per thread and then fma(slope, 8k + e, u) with immediates.  ``jnp`` on
  ``start + iota`` costs an IADD3, an I2FP and an FMUL a value instead (the
  d64 ALiBi forward's key vector, SASS: 192 instructions a step for 64 keys a
  thread).  Two roundings instead of one (< 1.5 ulp)."""
  @plgpu.inline_mgpu(
      arg_types=(plgpu.Layout.WG_SPLAT, plgpu.Layout.WG_SPLAT),
      return_type=plgpu.ShapeDtypeStruct((n,), jnp.float32, layout=COL))
  def body(_, slope, start):
    i32, f32 = ir.IntegerType.get_signless(32), ir.F32Type.get()
    layout = mgpu.WGMMA_LAYOUT.reduce((0,))
    assert layout.tiled_tiling_shape == (4, 2), layout  # 8 keys: 4 lanes x 2
    pair = layout.lane_indices()[-2]  # p
    k = arith_dialect.addi(start.registers[()], arith_dialect.muli(
        pair, arith_dialect.constant(i32, 2)))
    s = slope.registers[()]
    u = arith_dialect.mulf(s, arith_dialect.sitofp(f32, k))
    regs = np.empty(layout.registers_shape((n,)), object)
    for idx in np.ndindex(regs.shape):
      keys = (float(8 * idx[0] + e) for e in (0, 1))  # 8k + e, immediates
      vals = [math_dialect.fma(s, arith_dialect.constant(f32, x), u)
              for x in keys]
      regs[idx] = vector_dialect.from_elements(ir.VectorType.get([2], f32),
                                               vals)
    return mgpu.FragmentedArray(_registers=regs, _layout=layout,
                                _is_signed=None)

  return body(jnp.asarray(slope, jnp.float32), jnp.asarray(start, jnp.int32))


class AlibiTile:
  """ALiBi (``masks.alibi_bias``) of one score tile in base-2 logits (the
  slope ``slope2`` carries the log2 e, ``alibi_slopes``): queries
  q_start.. along axis ``q_dim`` of the tile, keys k_start.. along the
  other; row and column products on position vectors (``masks.alibi_terms``)
  relative to the first position along ``fixed_axis`` (the first query's
  diagonal key on the query axis, the first key on the key axis), whose
  vector is then the same for every tile of a loop over the other axis.
  Axis 1's vector has 16-32 values per thread in the WGMMA layout, axis 0's
  2.  fixed_axis=1 (axis 1's vector the same on every step): the compiler
  keeps it out of the loop, in registers.  fixed_axis=0: axis 1's vector is
  recomputed each step from the loop's tile start (an add, a conversion and
  a multiply per value).  The forward takes 0 on tiles of a static side
  +-1 (causal: with 1 ptxas spilled 532 bytes, with 0 144, H100 ALiBi run
  A1; the non-causal split loops: S4k N ALiBi / no-bias fwd+bwd 0.97 with
  0, 0.91 with 1, run A3), the dQ kernel and traced sides 1 (run A1 against
  run 23: the backward's ALiBi / no-bias speed fell with 0).  The dK/dV
  kernel (q_dim 1) takes 0 by default (``MosaicBackwardConfig.
  alibi_fixed_keys``; H200 2026-11-29: with 1 the fused d64 kernel spilled
  1068 bytes, and 0 ran its backward 8.4% faster at S4k N, level at d128).

  Where every pair of the tile lies on one side of the diagonal
  (``masks.alibi_side``; under ``causal`` masking every visible pair does)
  the bias is ``bcast(q_vec) + bcast(k_vec)`` (``masks.alibi_linear``):
  the kernels add q_vec to a per-row term they have anyway (the forward's
  running max, the backward's lse) and start the S GEMM's accumulator at
  ``k_init`` (as the backward's ``_row_terms`` do), so such a tile costs
  no work per score.  Where the diagonal crosses the tile its q_vec and
  k_vec are 0 and its scores need ``add_rest`` (element-wise, ``full``).
  ``side``: the tile's side when the caller knows it statically (a Python
  int: 1 under causal masking, else from the loops of ``alibi_split``);
  None: traced (``masks.alibi_side``), and ``add_rest`` branches on it.
  """

  def __init__(self, slope2, offset, q_start, k_start, shape, q_dim: int,
               causal: bool, fixed_axis: int = 1, side: int | None = None,
               fma_keys: bool = False, fma_queries: bool = False):
    self.slope2, self.shape, self.q_dim = slope2, shape, q_dim
    n_q, n_k = shape[q_dim], shape[1 - q_dim]
    origin = q_start + offset if fixed_axis == q_dim else k_start
    # key positions along COL, each step's own: ``scaled_key_positions``
    self._fma_keys = (fma_keys and q_dim == 0 and fixed_axis == 0,
                      k_start - origin, n_k)

    def rel(start, n, dim):  # start - origin + 0..n-1, the scalar part first
      return (start - origin) + plgpu.broadcasted_iota(
          jnp.int32, (n,), 0, layout=ROW if dim == 0 else COL)

    self._pos = (rel(q_start + offset, n_q, q_dim), rel(k_start, n_k,
                                                         1 - q_dim))
    self.row, self.col = masks.alibi_terms(slope2, *self._pos, 0)
    if causal:
      side = 1
    # static: a Python int (causal masking, or the loops of ``alibi_split``)
    self.static = side is not None
    self.side = side if self.static else masks.alibi_side(
        q_start, q_start + n_q - 1, k_start, k_start + n_k - 1, offset)
    self.q_vec, self.k_vec = masks.alibi_linear(self.side, self.row, self.col)
    if (fma_queries and q_dim == 1 and fixed_axis == 0 and self.static
        and self.side != 0):
      # the dK/dV kernel's per-step query vector along COL (-side * row,
      # ``masks.alibi_linear``) by one FFMA a query: ``scaled_key_positions``
      self.q_vec = scaled_key_positions(-self.side * slope2,
                                        q_start + offset - origin, n_q)

  def _bcast(self, x, dim):
    return plgpu.layout_cast(lax.broadcast_in_dim(x, self.shape, [dim]),
                             WGMMA)

  def full(self):
    """The bias of every score of the tile (``masks.alibi_from_terms``)."""
    return masks.alibi_from_terms(self.slope2,
                                  self._bcast(self.row, self.q_dim),
                                  self._bcast(self.col, 1 - self.q_dim))

  def k_init(self, c: float):
    """The S accumulator's share of the linear part: with it, c * acc is
    c * S + bcast(k_vec); None where that is zero (a static straddling
    tile).  Static side: side * slope2 / c times the positions, one
    multiply per key.  Traced: k_vec / c, from the products that ``full``
    uses as well (slope2 / c first, the non-causal forward spilled 424
    bytes instead of 172, the dK/dV kernel 344 instead of 228; H100 ALiBi
    run A2)."""
    if not self.static:
      return self._bcast(self.k_vec * (1.0 / c), 1 - self.q_dim)
    if self.side == 0:
      return None
    fma, first, n = self._fma_keys
    if fma:  # (masks.alibi_terms' column product, one FFMA a key)
      col = scaled_key_positions(self.slope2 * (self.side / c), first, n)
    else:
      _, col = masks.alibi_terms(self.slope2 * (self.side / c), *self._pos,
                                 0)
    return self._bcast(col, 1 - self.q_dim)

  def add_rest(self, acc, c: float):
    """acc (c * acc the base-2 logits) plus what ``k_init`` and q_vec
    leave out: ``full() / c`` on a straddling tile, else nothing."""
    add = lambda a: a + self.full() * (1.0 / c)
    if self.static:
      return add(acc) if self.side == 0 else acc
    return lax.cond(self.side == 0, add, lambda a: a, acc)


def alibi_split(first, last, offset, block: int, loop_over_keys: bool):
  """``run_steps``'s ``alibi_tiles`` for a loop over tiles of ``block``
  keys (``loop_over_keys``) against query rows [first, last], or over
  tiles of ``block`` query rows against keys [first, last]: key tile t
  lies left of the diagonal (side 1, ``masks.alibi_side``) iff
  t * block + block - 1 <= first + offset, right of it (-1) iff
  t * block >= last + offset; query tiles mirror this.  Tiles from 0."""
  if loop_over_keys:
    d_a, d_b, sides = first + offset + 1, last + offset, (1, -1)
  else:
    d_a, d_b, sides = first - offset + 1, last - offset, (-1, 1)
  t_a = lax.div(jnp.maximum(d_a, 0), block)  # floor(d_a / block), 0 if < 0
  t_b = lax.div(jnp.maximum(d_b, 0) + (block - 1), block)  # ceil(d_b / block)
  return t_a, t_b, *sides


def folds_alibi(scale: float, cap: float | None) -> bool:
  """Whether the kernels fold ALiBi's linear part into the S accumulator
  (``AlibiTile.k_init``): the logits must be c * S with c > 0."""
  return cap is None and scale > 0


def alibi_slopes(arrays: masks.MaskArrays, b: int):
  """The kernels' ALiBi operand: slopes x log2 e as [B, N] float32."""
  slopes = arrays.alibi_slopes.astype(jnp.float32) * LOG2E
  return jnp.broadcast_to(slopes, (b, slopes.shape[-1]))


def dropout_keys(arrays: masks.MaskArrays, tp: int, sp: int):
  """The kernels' dropout operands: the ``dropout.row_keys`` (additive key,
  multiplier) of every (batch row, head, padded query row), int32 [B, N, Tp]
  each (the two rows of a pair hold the same keys; the half shift follows
  from a row's place in its tile), and the ``dropout.col_keys`` of the
  padded key columns, int32 [Sp]; hashed once here in XLA (as
  ``triton.tiles.prepare_mask_inputs`` does), so that a pair of scores costs
  the multiply-add, fold and compare of ``dropout.keep``.  Padded rows and
  keys get keys too; their scores are masked or sliced off."""
  rows = dropout.row_keys(arrays.dropout_seeds[:, :, None],
                          jnp.arange(tp, dtype=jnp.int32))
  return [*rows[:2], dropout.col_keys(jnp.arange(sp, dtype=jnp.int32))]


def _keep_select(pairs, row_keys, col_keys, thresh, query_major: bool):
  """``DropoutTiles.select`` in inline PTX on WGMMA-layout tiles.

  A WGMMA register holds entries (row, col), (row, col + 1); the registers
  of index [.., n8 block, .., half, ..] = ``idx[1]``, ``idx[4]`` hold rows
  +8 apart (``idx[4]``) and columns +8 apart (``idx[1]``).  Query-major
  (forward, dQ) the pair (i, i + 8) is ``idx[4]`` 0 / 1 and a register's two
  entries are two keys: two words.  Key-major (dK/dV) it is ``idx[1]``
  2g / 2g + 1 and a register's two entries are two query pairs: two words.
  Per word: IMAD, the fold (``mad.hi`` by 2^16: one LEA.HI), and one
  ``setp.f16x2`` (HSETP2) for the keep bits of the pair's two rows."""
  t, keep_below = thresh
  cmp = "lt" if keep_below else "geu"  # keep iff x < t, or iff not x < t
  r_t, m_t = row_keys
  xs = [x for x, _ in pairs]
  others = [o for _, o in pairs if o is not None]
  shape = xs[0].shape

  @plgpu.inline_mgpu(
      arg_types=(WGMMA,) * (3 + len(xs) + len(others)),
      return_type=tuple(plgpu.ShapeDtypeStruct(shape, jnp.float32,
                                               layout=WGMMA) for _ in xs))
  def body(_, c, r, m, *tiles):
    i32 = ir.IntegerType.get_signless(32)
    f32 = ir.F32Type.get()
    ext = lambda reg, e: vector_dialect.extract(reg, [], [e])
    x_regs = [x.registers for x in tiles[:len(xs)]]
    o_iter = iter(tiles[len(xs):])
    o_regs = [None if o is None else next(o_iter).registers for _, o in pairs]
    outs = [np.empty(x.shape, object) for x in x_regs]
    t2 = arith_dialect.constant(i32, t | t << 16)
    n_out = 4 * len(pairs)
    arg = lambda k: f"${n_out + k}"  # the k-th input operand
    for idx in np.ndindex(x_regs[0].shape):
      if (idx[4] if query_major else idx[1] % 2) != 0:
        continue
      idx2 = (idx[:4] + (1,) + idx[5:] if query_major
              else (idx[0], idx[1] + 1) + idx[2:])
      if query_major:  # the pair's keys, each entry's column key
        words = [(ext(c.registers[idx], e), ext(m.registers[idx], 0),
                  ext(r.registers[idx], 0)) for e in (0, 1)]
      else:  # the key's column key, each entry's pair keys
        words = [(ext(c.registers[idx], 0), ext(m.registers[idx], e),
                  ext(r.registers[idx], e)) for e in (0, 1)]
      args = [v for w in words for v in w] + [t2]
      lines = [".reg .b32 w0, w1;", ".reg .pred a0, b0, a1, b1;"]
      for e in (0, 1):
        lines.append(f"mad.lo.u32 w{e}, {arg(3 * e)}, {arg(3 * e + 1)}, "
                     f"{arg(3 * e + 2)};")
        lines.append(f"mad.hi.u32 w{e}, w{e}, 65536, w{e};")  # dropout.fold
        lines.append(f"setp.{cmp}.f16x2 a{e}|b{e}, w{e}, {arg(6)};")
      out = 0
      for k in range(len(pairs)):
        for reg_idx, pred in ((idx, "a"), (idx2, "b")):
          for e in (0, 1):
            args.append(ext(x_regs[k][reg_idx], e))
            x_op = arg(len(args) - 1)
            if o_regs[k] is None:
              o_op = "0f00000000"
            else:
              args.append(ext(o_regs[k][reg_idx], e))
              o_op = arg(len(args) - 1)
            lines.append(f"selp.f32 ${out}, {x_op}, {o_op}, {pred}{e};")
            out += 1
      res = mgpu_utils.inline_ptx("{ " + " ".join(lines) + " }", *args,
                                  result_types=[f32] * n_out)
      res = iter(res)
      for k in range(len(pairs)):
        for reg_idx in (idx, idx2):
          y0, y1 = next(res), next(res)
          outs[k][reg_idx] = vector_dialect.from_elements(
              ir.VectorType.get([2], f32), [y0, y1])
    return tuple(mgpu.FragmentedArray(_registers=o, _layout=c.layout,
                                      _is_signed=None) for o in outs)

  return list(body(col_keys, r_t, m_t, *xs, *others))


def copy_row_pair(refs, b, n, q_rows, ring, bars, slot):
  """TMA copies of query rows ``q_rows`` of (b, n) of two [B, N, T] refs
  into slot ``slot`` of a [stages, 2, rows] ring (the dK/dV kernel's, beside
  Q / dO); both arrive on the slot's barrier (``num_arrivals=2``)."""
  for a, ref in enumerate(refs):
    plgpu.copy_gmem_to_smem(ref.at[b, n, q_rows], ring.at[slot, a],
                            bars.at[slot])


class DropoutTiles:
  """The ``dropout.keep`` bits of score tiles, from ``dropout_keys``'
  refs (row additive keys, row multipliers [B, N, Tp], column keys [Sp]).

  ``q_dim``: the tile axis along which queries run (0 query-major: the
  forward, the dQ kernel; 1 key-major: the dK/dV kernel).  Keys are
  vectors in the WGMMA row / column layout, broadcast to the tile: the
  same bits as the reference's and the Triton kernels', whatever the
  tiles.  The keys of the CTA's own rows are loaded once per item (``rows``
  or ``cols``); the per-step keys of the loop's tiles come through the
  producer's TMA ring with the tiles (``ring_cols``; the dK/dV kernel's
  row keys likewise, ``ring_rows``).  With global loads after the score
  GEMMs instead, the backward ran at 0.61-0.70x of its no-dropout speed;
  with the rings at 0.67-0.78x (H100, 2026-11-23, run 46; history at
  commit 29bf24f)."""

  def __init__(self, refs, rate: float, shape, q_dim: int):
    self.add_ref, self.mul_ref, self.col_ref = refs
    self.thresh = dropout.threshold(rate)
    self.shape, self.q_dim = shape, q_dim

  @classmethod
  def pop(cls, refs: list, rate: float, shape, q_dim: int):
    """The tiles of the three ``dropout_keys`` refs at the front of a
    kernel's ``refs`` (popped), or None without dropout (no operands)."""
    if rate <= 0.0:
      return None
    return cls([refs.pop(0) for _ in range(3)], rate, shape, q_dim)

  def _vec(self, ref, dim):
    x = plgpu.load(ref, layout=ROW if dim == 0 else COL, optimized=False)
    return lax.broadcast_in_dim(x, self.shape, [dim])

  def rows(self, b, n, q_rows):
    """The row-key pair of query rows ``q_rows`` of (b, n), tile-shaped."""
    return tuple(self._vec(ref.at[b, n, q_rows], self.q_dim)
                 for ref in (self.add_ref, self.mul_ref))

  def cols(self, k_rows):
    """The column keys of keys ``k_rows``, tile-shaped."""
    return self._vec(self.col_ref.at[k_rows], 1 - self.q_dim)

  def ring_cols(self, key_smem, key_bars, slot):
    """The column keys of ring slot ``slot`` (``load_kv_tiles``' keys),
    tile-shaped, once they have landed."""
    plgpu.barrier_wait(key_bars.at[slot])
    return self._vec(key_smem.at[slot], 1 - self.q_dim)

  def copy_rows(self, b, n, q_rows, key_smem, key_bars, slot):
    """``copy_row_pair`` of the row-key pair (what ``ring_rows`` reads)."""
    copy_row_pair((self.add_ref, self.mul_ref), b, n, q_rows, key_smem,
                  key_bars, slot)

  def ring_rows(self, key_smem, key_bars, slot):
    """The row-key pair of ring slot ``slot`` ([stages, 2, rows] int32:
    the dK/dV kernel's, copied with Q / dO), tile-shaped, once landed."""
    plgpu.barrier_wait(key_bars.at[slot])
    return tuple(self._vec(key_smem.at[slot, a], self.q_dim)
                 for a in range(2))

  def keep(self, row_keys, col_keys):
    """Bool keep bits of the tile (``rows``, ``cols``), as ``dropout.keep``
    in jnp.  A tile's first query row is a multiple of 16, so a row's half
    of its pair's word is that of its position in the tile."""
    q_pos = plgpu.broadcasted_iota(jnp.int32, self.shape, self.q_dim,
                                   layout=WGMMA)
    return dropout.keep((*row_keys, dropout.half_shift(q_pos)), col_keys,
                        self.thresh)

  def select(self, pairs, row_keys, col_keys, interpret: bool):
    """[where(keep, x, other) for (x, other) in pairs]: f32 tiles, ``other``
    a tile or None (zeros).  On the GPU in PTX, per pair of query rows
    (i, i + 8) that a thread holds and per key: an IMAD and a LEA.HI for the
    (folded) word, one ``setp.f16x2`` for both keep bits (HSETP2), one
    select per tile entry (``_keep_select``); in interpret mode with
    ``keep``."""
    if interpret:
      keep = self.keep(row_keys, col_keys)
      return [jnp.where(keep, x, 0.0 if o is None else o) for x, o in pairs]
    return _keep_select(pairs, row_keys, col_keys, self.thresh,
                        query_major=self.q_dim == 0)


class BiasRing:
  """An additive bias read tile by tile through the producer's TMA ring, as
  K and V are (FA3 Sec. 3.1's producer; the earlier attempt's f32 loads of
  every tile from global memory ran at 0.70-0.79x cuDNN).

  ``ref``: the bias [Bb, Nb, T, S] in its own dtype (float16 /
  bfloat16), Bb and Nb 1 where broadcast (a size-1 dim reads index 0: the
  same tile for every batch row / head); TMA reads the tiles' parts past T
  and S as zeros (``operand``).
  ``smem``: one slot per ring stage, each on its own "loaded" barrier
  (``bars``), freed with the ring slot it is copied beside.  Query-major
  (the forward, the backward's dQ kernel): [stages, rows, block_kv], the
  step's tile of all the CTA's rows (consumers * block_q), one TMA copy
  with the V tile (freed with the V slot: the consumers read it before
  their P V GEMM, the dQ kernel's before its V slot's release).  Key-major
  (the dK/dV kernel, ``parts`` = consumers): [stages, parts, block_q,
  block_kv], consumer w's [block_q, block_kv] tile of the step's query rows
  against its keys, ``parts`` TMA copies with Q / dO (``copy_parts``),
  read transposed (``load_transposed``)."""

  def __init__(self, ref, smem, bars):
    self.ref, self.smem, self.bars = ref, smem, bars
    self.rows, self.block_kv = smem.shape[-2:]

  def _copy(self, b, n, rows, cols, dst, slot):
    bb = b if self.ref.shape[0] > 1 else 0
    nb = n if self.ref.shape[1] > 1 else 0
    plgpu.copy_gmem_to_smem(self.ref.at[bb, nb, rows, cols], dst,
                            self.bars.at[slot])

  def copy(self, item: Item, kt, slot):
    """Producer: the tile of the item's rows and kv tile kt into ``slot``."""
    self._copy(item.b, item.n, pl.ds(item.qt * self.rows, self.rows),
               pl.ds(kt * self.block_kv, self.block_kv), self.smem.at[slot],
               slot)

  def copy_parts(self, b, n, q_rows, first_key, slot):
    """Producer (key-major ring): query rows ``q_rows`` of (b, n) against
    block_kv keys from first_key + w * block_kv into part w of ``slot``,
    one TMA copy per part (the slot's barrier takes one arrival each)."""
    for w in range(self.smem.shape[1]):
      self._copy(b, n, q_rows,
                 pl.ds(first_key + w * self.block_kv, self.block_kv),
                 self.smem.at[slot, w], slot)

  def load(self, slot, row0, block_q: int):
    """Consumer: rows row0.. of slot's tile, once landed, in the bias dtype
    in the WGMMA accumulator layout [block_q, block_kv] (16 registers per
    thread per 64 keys; the kernel loads it under the S GEMM)."""
    plgpu.barrier_wait(self.bars.at[slot])
    return plgpu.load(self.smem.at[slot, pl.ds(row0, block_q)], layout=WGMMA)

  def load_transposed(self, slot, w):
    """Consumer w (key-major ring): its part of slot's tile, once landed,
    as [block_kv, block_q] in the WGMMA accumulator layout, the layout of
    the dK/dV kernel's S^T (``ldmatrix.trans`` from the swizzled tile)."""
    plgpu.barrier_wait(self.bars.at[slot])
    return plgpu.load(self.smem.at[slot, w].transpose((1, 0)), layout=WGMMA)

  @staticmethod
  def logits(tile):
    """A loaded tile as base-2 logits: f32, x log2 e."""
    return tile.astype(jnp.float32) * LOG2E

  @staticmethod
  def scratch(num_stages: int, rows: int, block_kv: int, dtype,
              parts: int = 0):
    """(its smem, its barriers) for the kernel's scratch; ``parts`` > 0:
    the key-major ring of that many parts."""
    shape = (num_stages, *((parts,) if parts else ()), rows, block_kv)
    return (plgpu.SMEM(shape, dtype,
                       transforms=(plgpu.TilingTransform(_BIAS_TILE),
                                   plgpu.SwizzleTransform(128))),
            plgpu.Barrier(num_arrivals=max(parts, 1),
                          num_barriers=num_stages))

  @staticmethod
  def in_place(bias) -> bool:
    """Whether the kernels read ``bias`` (and write its dbias partial) as
    it is, T and S not whole tiles: TMA reads a tile's part past the array
    as zeros and drops a store's (padded rows are sliced off, keys past
    kv_len are masked), but Mosaic GPU's TMA copies into the (8, 64)-tiled
    ring take T and S in whole (8, 64) tiles.  Else ``operand`` zero-pads
    the bias to whole kernel tiles, an XLA copy of all of it per call (and
    dbias's slice another)."""
    _, _, t, s = bias.shape
    return t % _BIAS_TILE[0] == 0 and s % _BIAS_TILE[1] == 0

  @classmethod
  def operand(cls, bias, tp: int, sp: int):
    """The kernel's bias operand: the bias itself (``in_place``, which
    whole kernel tiles always are), else [Bb, Nb, Tp, Sp] zero-padded."""
    if cls.in_place(bias):
      return bias
    _, _, t, s = bias.shape
    return jnp.pad(bias, ((0, 0), (0, 0), (0, tp - t), (0, sp - s)))
