"""Pallas-Triton split-KV decoding ("flash-decoding"), contiguous and paged K/V.

Decoding has few query tokens T per sequence against a long K/V length S, so
the forward's grid (query tiles x B x N) leaves most SMs idle and the step is
bound by reading K/V from HBM.  Here the K/V length is split across programs
(Dao et al., "Flash-Decoding for long-context inference", 2023):

* grid ``(K, row_tiles * num_splits, B)``: one program per (kv head, row
  tile, split, batch), the kv heads varying fastest so that the K programs
  reading the same cache rows run together (``DecodeConfig.heads_first``;
  off: ``(row_tiles * num_splits, B, K)``);
* GQA/MQA packing: the G = N / K query heads of one kv head times the T query
  tokens are the rows of one tile (row ``r = t * G + g``, [block_r, Hp] with
  block_r >= 16 for the tensor-core dot), so K/V are read once per kv head;
* each program streams its split's [block_k, Hp] K/V tiles with the
  FlashAttention-2 online softmax (FA-2 Alg. 1, log2 domain as in
  ``triton/tiles.py``) and writes its normalised partial output (f32) and
  log2-sum-exp;
* the last program of a (row tile, batch, kv head) to finish merges the
  splits exactly in the same launch: ``out = sum_s w_s o_s / sum_s w_s`` with
  ``w_s = exp2(lse_s - max lse)``.  "Last" is decided by an atomic ticket
  (the serial split-K semaphore of CUTLASS, the threadfence-reduction
  pattern); whichever program it is, it reads every split back from global
  memory in split order, so the result does not depend on the arrival order.
  With one split the program writes the final output itself.

Each sequence's visible key range (lengths, bottom-right causal diagonal,
window: ``masks.kv_bounds``) is divided evenly among the splits, so a ragged
batch never reads past a sequence's fill and a split with no keys writes an
empty partial (lse = -inf, weight 0).  Tiles the position mask covers entirely
run unmasked, edge tiles pay for the element-wise ``masks.position_visible``.

Paged K/V (vLLM, flash-attn ``block_table``): pages ``[P, page_size, K, H]``
and a per-sequence table ``[B, max_pages]`` of page numbers; key ``j`` of
sequence ``b`` lives at ``pages[table[b, j // page_size], j % page_size]``.
The kernel gathers each tile's rows through the table (clamped to
``[0, P)``, loads masked beyond the sequence's length).

Letters as in ``api.py``: B batch, T query length, S key/value length
(``max_pages * page_size`` when paged), N query heads, K kv heads,
G = N / K, H head dim (Hp: padded to a power of two >= 16), R = T * G rows.
"""
from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from pallas_flash import masks
from pallas_flash.params import KernelParams
from pallas_flash.triton import tiles
from pallas_flash.triton.forward import kv_tile_loops

# Dispatch rule of ``flash_attention(implementation=None)`` on a GPU (see
# ``suits``): the split-KV path takes T <= MAX_T query tokens against
# S >= MIN_S_PER_T * T keys.
MAX_T = 64
MIN_S_PER_T = 8
_INTERPRET_CORES = 8  # SM count assumed off-GPU (interpret mode)
# Most splits per (batch, kv head, row tile): the merge reads them all back.
MAX_SPLITS = 128
# f32 per thread the merge loads before it uses any (``_merge_splits``; 33
# splits of 4 rows at d128 and 4 warps take 132).
MERGE_INFLIGHT = 192
# Shared memory for the pipelined K/V tiles: Triton keeps num_stages - 1
# buffers of the [block_k, Hp] K and V tiles (bf16 d128, block_k 128,
# 3 stages: 128 KiB, which ran on the H100).  block_k is halved until the
# estimate fits this budget (A100: 164 KiB per block; H100/H200: 227 KiB), so
# f32 or d256 inputs get smaller tiles instead of a launch failure.
SMEM_BUDGET = 160 * 1024


def _pow2(x: int) -> bool:
  return x >= 16 and (x & (x - 1)) == 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class DecodeConfig:
  """Tiles and launch parameters of the split-KV kernel.

  Passing one as ``config`` with ``implementation="triton"`` to
  ``flash_attention`` forces the split-KV kernel.

  ``None`` fields are chosen from the static shapes by ``launch`` (the rule
  tuned on an H200, see there); the lengths are traced, so no choice can
  depend on them (a ragged batch is launched as a full one).

  Attributes:
    block_k: keys per K/V tile ([block_k, Hp] per load); None: 64 when the
      (batch, kv head, row tile) programs number fewer than the SMs, else
      128.
    block_rows: most query rows (G * T, padded to a power of two >= 16) per
      program; more rows are split into row tiles that each re-read K/V.
    num_warps, num_stages: launch parameters (stages = Triton's software
      pipelining depth of the K/V loads); ``num_stages`` None: 2 with one
      split when the programs alone cover the SMs, else 3.
    num_splits: K/V splits per (batch, kv head, row tile), at most
      ``MAX_SPLITS`` = 128 and one per K/V tile; ``None`` chooses
      ``ceil(waves * SMs / programs)``, at most one split per
      ``min_split_keys`` keys (``full_grid_split_keys`` when the programs
      alone already number at least the SMs).
    waves: target programs per SM when ``num_splits`` is None.
    min_split_keys, full_grid_split_keys: fewest keys per split when
      ``num_splits`` is None (see ``num_splits``).
    heads_first: put the kv heads on the fastest-varying grid axis, so that
      the programs reading the same cache rows (one per kv head) run
      together; off: splits vary fastest.  On by default: in an interleaved
      sweep on an H100 (decode run 3, ``git show
      29bf24f:benchmarks/RESULTS.md``) it was 1.6% (32:1:32k), 5% (32:1:4k)
      and 9% (32:1:32k ragged) faster than off.
  """

  block_k: int | None = None
  block_rows: int = 64
  num_warps: int = 4
  num_stages: int | None = None
  num_splits: int | None = None
  waves: int = 2
  min_split_keys: int = 256
  full_grid_split_keys: int = 8192
  heads_first: bool = True

  def __post_init__(self):
    for name in ("block_k", "block_rows"):
      value = getattr(self, name)
      if not (value is None and name == "block_k") and not _pow2(value):
        raise ValueError(f"{name}={value} must be a power of two >= 16")
    for name in ("num_warps", "num_stages", "num_splits", "waves",
                 "min_split_keys", "full_grid_split_keys"):
      value = getattr(self, name)
      if value is None and name in ("num_stages", "num_splits"):
        continue
      if not (isinstance(value, int) and value >= 1):
        raise ValueError(f"{name}={value!r} must be a positive int")
    if not isinstance(self.heads_first, bool):
      raise ValueError(f"heads_first={self.heads_first!r} must be a bool")


def suits(t: int, s: int, spec: masks.MaskSpec, score_terms: bool) -> bool:
  """Whether ``flash_attention(implementation=None)`` takes the split-KV path
  (``score_terms``: the call has a bias, ALiBi or dropout, which it lacks)."""
  return (not score_terms and not spec.needs_elementwise and t <= MAX_T
          and s >= MIN_S_PER_T * t)


def check_supported(params: KernelParams, q, k):
  del q, k
  if params.spec.needs_elementwise:
    raise NotImplementedError(
        "the split-KV decode kernel takes lengths, causal, window and soft-cap; "
        "segment ids and dense masks go to the forward kernels")


def sm_count() -> int:
  if jax.default_backend() != "gpu":
    return _INTERPRET_CORES
  return int(getattr(jax.devices()[0], "core_count", 0) or 132)


# The rule of ``launch`` (block_k, stages, splits from B x K x row tiles,
# S and the SM count), from in-jit sweeps on an H200 (2026-11-23, bf16
# N32/K8 d128, in-jit time per call, ratios to cuDNN in the same process;
# run 5: benchmarks/results/decode_2026-11-23b_h200/, run 6: ..._23c_h200/,
# both at commit 29bf24f):
# * few programs (B = 1: 8 < 132 SMs; the splits fill the GPU): block_k 64
#   at the default 33 splits.  Run 5: block_k 64 / 4 stages 43.1 us at
#   1:1:32k (1.08x cuDNN; block_k 128 / 3 stages 46.1) and 135.0 at 1:1:128k
#   (1.04x; 137.1); 64 or 128 splits 0.67-0.98x cuDNN.  Run 6 (merge loads
#   unrolled): 3 stages the fastest of the block_k 64 variants in all three
#   batch-1 cells, 11.1 / 41.3 / 132.1 us at 4k / 32k / 128k against 11.6 /
#   42.1 / 133.9 with 4; 32 splits (whole tiles per split) 132.4, 48 splits
#   with 3 stages (three programs per SM) 136.0, 2 warps 134.6, block_k 32
#   132.3-133.0 at 128k (40.8-41.5 at 32k).  (Our reading, not measured: by
#   the ``SMEM_BUDGET`` estimate 3 stages of block_k 64 take 64 KiB and the
#   264 programs run in one wave, two or three per SM.)
# * programs >= SMs (B = 32: 256): a split only where each gets >= 8192 keys
#   (``full_grid_split_keys``): at 32:1:4k one split read 1.02-1.05x cuDNN
#   and two 0.88-0.93x; at 32k two splits (the waves rule) 1.02x on the full
#   cache and 1.22x ragged against one split's 1.02x and 1.07x; 32:1:128k two
#   splits 1.02x, one 1.01x.  One split: 2 stages (block_k 128), 130.5 us at
#   32:1:4k against 133.4 with 3 (and 988 against 988-1000 us at 32:1:32k).
#   The crossover between 4k and 32k keys was not measured; confirmation
#   run 5: 1.04x at 32:1:4k, 1.01x / 1.02x at 32k / 128k, 1.17x ragged.
def num_splits(cfg: DecodeConfig, *, programs: int, s: int) -> int:
  """K/V splits so that ``programs * splits`` fills the GPU ``waves`` times,
  each split ``min_split_keys`` keys or more; when the programs alone cover
  the SMs, splits are only for balance and need ``full_grid_split_keys``
  keys each.  ``cfg.block_k`` must be set (``launch``)."""
  most = max(1, min(pl.cdiv(s, cfg.block_k), MAX_SPLITS))
  if cfg.num_splits is not None:
    return min(cfg.num_splits, most)
  sms = sm_count()
  want = pl.cdiv(cfg.waves * sms, programs)
  floor = cfg.min_split_keys if programs < sms else cfg.full_grid_split_keys
  return max(1, min(want, s // floor, most))


def launch(cfg: DecodeConfig, *, programs: int, s: int, head_dim_padded: int,
           itemsize: int) -> DecodeConfig:
  """``cfg`` with block_k, num_stages and num_splits set (the tuned rule
  above where they are None) for ``programs`` = B x K x row tiles (before
  splitting) over S keys; block_k halved until the pipelined K/V tiles fit
  ``SMEM_BUDGET`` (and at most S rounded up to a power of two)."""
  few = programs < sm_count()
  block_k = max(16, min(cfg.block_k or (64 if few else 128), pl.next_power_of_2(s)))
  cfg = dataclasses.replace(cfg, block_k=block_k)
  splits = num_splits(cfg, programs=programs, s=s)
  stages = cfg.num_stages or (2 if splits == 1 and not few else 3)
  buffers = 2 * max(stages - 1, 1)  # K and V tiles per stage
  while block_k > 16 and buffers * block_k * head_dim_padded * itemsize > SMEM_BUDGET:
    block_k //= 2
  return dataclasses.replace(cfg, block_k=block_k, num_stages=stages,
                             num_splits=splits)


def _decode_kernel(q_ref, k_ref, v_ref, q_len_ref, kv_len_ref, shift_ref,
                   table_ref, o_ref, lse_ref, part_o_ref, part_lse_ref, ticket_ref, *,
                   spec: masks.MaskSpec, scale: float, cap: float | None,
                   group: int, t: int, s: int, block_r: int, block_k: int,
                   head_dim: int, splits: int, page_size: int | None,
                   interpret: bool, part_axis: int, num_warps: int):
  """One (row tile x split, batch, kv head) program.  ``table_ref`` is None
  unless paged; ``part_*`` and ``ticket_ref`` are None with one split."""
  rows = t * group
  row_tile = pl.program_id(part_axis) // splits
  split = pl.program_id(part_axis) % splits
  r0 = row_tile * block_r
  q = tiles.load_rows(q_ref, r0, block_r, rows, head_dim)  # [block_r, Hp]
  # The lengths clamped and the diagonal placed here, not by XLA ops around
  # the call: each such op was one more launch per call (the 1:1:4k loop's
  # HLO in the sweep had a clamp fusion per call beside the kernel).
  q_len = jnp.clip(q_len_ref[()], 0, t)
  kv_len = jnp.clip(kv_len_ref[()], 0, s)
  offset = masks.diagonal_offset(spec, q_len, kv_len, shift_ref[()])
  t_pos = (r0 + jnp.arange(block_r)) // group  # query token of each row
  t_start = r0 // group
  t_end = jnp.minimum((r0 + block_r - 1) // group + 1, q_len)

  # -- this split's share of the tiles the rows may see (masks.kv_bounds)
  first, full_first, full_last, last = kv_tile_loops(
      spec, t_start, t_end, kv_len, offset, block_k)
  last = jnp.where(t_end > t_start, last, first)
  per_split = pl.cdiv(last - first, splits)
  lo = jnp.minimum(first + split * per_split, last)
  hi = jnp.minimum(lo + per_split, last)
  unmasked_lo = jnp.clip(full_first, lo, hi)
  unmasked_hi = jnp.clip(full_last, unmasked_lo, hi)

  head_dim_padded = q_ref.shape[-1]
  cols_ok = jnp.arange(head_dim_padded) < head_dim

  def load_kv(ref, k_start, masked: bool):
    """[block_k, Hp] rows of K or V; masked loads stop at kv_len."""
    keys = k_start + jnp.arange(block_k)
    if page_size is None:
      if not masked:
        return tiles.load_rows(ref, k_start, block_k, s, head_dim)
      mask = (keys < kv_len)[:, None] & cols_ok[None, :]
      return plgpu.load(ref.at[pl.ds(k_start, block_k), :], mask=mask, other=0.0)
    # Paged: gather each key's page through the block table (clamped so an
    # out-of-range entry never addresses outside the page pool).
    slot = jnp.minimum(keys // page_size, table_ref.shape[0] - 1)
    page = jnp.clip(table_ref[slot], 0, ref.shape[0] - 1)
    # Three broadcasting index arrays ([block_k, 1] page and row, [1, Hp]
    # column) form the [block_k, Hp] gather.
    idx = (page[:, None], (keys % page_size)[:, None],
           jnp.arange(head_dim_padded)[None, :])
    mask = cols_ok[None, :]
    if masked:
      mask = mask & (keys < kv_len)[:, None]
    if head_dim == head_dim_padded and not masked:
      return plgpu.load(ref.at[idx])
    return plgpu.load(ref.at[idx], mask=mask, other=0.0)

  def body(tile_k, carry, *, masked: bool):
    acc, m_prev, l_prev = carry
    k_start = tile_k * block_k
    k = load_kv(k_ref, k_start, masked)
    s2, _ = tiles.scores(q, k, scale=scale, cap=cap)  # [block_r, block_k]
    if masked:
      k_pos = k_start + jnp.arange(block_k)
      ok = masks.position_visible(spec, t_pos[:, None], k_pos[None, :], q_len,
                                  kv_len, offset)
      s2 = jnp.where(ok, s2, masks.MASK_VALUE)
    # -- update m and l (FA-2 Alg. 1 lines 8-10), rescale acc lazily
    m_next = jnp.maximum(m_prev, jnp.max(s2, axis=1))
    alpha = jnp.exp2(m_prev - m_next)
    p = jnp.exp2(s2 - m_next[:, None])
    l_next = l_prev * alpha + jnp.sum(p, axis=1)
    v = load_kv(v_ref, k_start, masked)
    acc = acc * alpha[:, None] + tiles.dot(p.astype(v.dtype), v)
    return acc, m_next, l_next

  carry = (jnp.zeros((block_r, head_dim_padded), jnp.float32),
           jnp.full((block_r,), -jnp.inf, jnp.float32),
           jnp.zeros((block_r,), jnp.float32))
  masked_body = functools.partial(body, masked=True)
  carry = lax.fori_loop(lo, unmasked_lo, masked_body, carry)
  carry = lax.fori_loop(unmasked_lo, unmasked_hi,
                        functools.partial(body, masked=False), carry)
  acc, m, l = lax.fori_loop(unmasked_hi, hi, masked_body, carry)

  # A row that saw no key in this split (or is past q_len) is empty: out 0,
  # lse2 -inf, so that it weighs nothing in the merge.
  empty = (m <= masks.MASK_VALUE) | (t_pos >= q_len)
  l_safe = jnp.where(empty, 1.0, l)
  out = jnp.where(empty[:, None], 0.0, acc / l_safe[:, None])
  lse2 = jnp.where(empty, -jnp.inf, m + jnp.log2(l_safe))
  if splits == 1:
    tiles.store_rows(o_ref, out, r0, block_r, rows, head_dim)
    plgpu.store(lse_ref, jnp.where(empty, jnp.inf, lse2 * tiles.LN2),
                mask=r0 + jnp.arange(block_r) < rows)
    return
  # -- this split's partial [block_r, Hp] f32 and lse2 (real rows only: one
  # token of 4 heads writes 4 of the dot's 16 rows, 2 KiB instead of 8 at
  # d128; the merge reads rows < cr and stores rows < R), then a ticket
  row_ok = r0 + jnp.arange(block_r) < rows
  plgpu.store(part_o_ref.at[split], out, mask=row_ok[:, None])
  plgpu.store(part_lse_ref.at[split], lse2, mask=row_ok)
  if not interpret:  # (interpret mode runs the programs one after another)
    plgpu.debug_barrier()  # every thread's stores precede the ticket
  # acq_rel at GPU scope: releases this program's partial; the last program
  # acquires all the others' before it reads them.
  ticket = plgpu.atomic_add(ticket_ref, row_tile, jnp.ones((), jnp.int32))

  @pl.when(ticket == splits - 1)
  def _merge():
    _merge_splits(part_o_ref, part_lse_ref, o_ref, lse_ref, r0=r0, rows=rows,
                  block_r=block_r, head_dim=head_dim, splits=splits,
                  num_warps=num_warps)


def _merge_splits(part_o_ref, part_lse_ref, o_ref, lse_ref, *, r0, rows: int,
                  block_r: int, head_dim: int, splits: int, num_warps: int):
  """Exact merge of one row tile's splits (the flash-decoding reduction):
  ``out = sum_s w_s o_s / sum_s w_s``, ``w_s = exp2(lse2_s - m)``, m the
  running max of the lse2 (FA-2's online rescaling, over chunks of splits).

  Reads the [splits, cr, Hp] f32 partials back in split order, ``chunk``
  splits per [chunk, cr, Hp] load (<= 8192 f32); cr = the tile's rows rounded
  up to a power of two (4 for one token of 4 query heads per kv head, not the
  16 of the dot).  The chunks are unrolled and the loads of up to
  ``MERGE_INFLIGHT`` f32 per thread are issued before any is used, so the
  merge waits about one memory round trip, not one per chunk plus one for a
  pass over the lse2 (run 6: 1.1 us less at 1:1:128k, 1.2 at 1:1:32k).
  Other programs wrote the partials: their release and this program's
  acquire (the ticket) order those stores before these loads.  In a partly
  filled last row tile, rows >= R were never written: each row merges on
  its own and those rows are not stored."""
  cr = min(block_r, pl.next_power_of_2(rows))
  hp = part_o_ref.shape[-1]
  chunk = max(1, min(pl.next_power_of_2(splits), 8192 // (cr * hp)))

  def load(first, size):  # [size, cr] lse2 (-inf past splits), [size, cr, Hp]
    ok = (first + jnp.arange(size) < splits)[:, None]
    lse_c = plgpu.load(part_lse_ref.at[pl.ds(first, size), pl.ds(0, cr)],
                       mask=ok, other=-jnp.inf)
    o_c = plgpu.load(part_o_ref.at[pl.ds(first, size), pl.ds(0, cr), :],
                     mask=ok[:, :, None], other=0.0)
    return lse_c, o_c

  def fold(carry, lse_c, o_c):
    acc, l, m = carry
    m_next = jnp.maximum(m, jnp.max(lse_c, axis=0))
    m_safe = jnp.where(m_next == -jnp.inf, 0.0, m_next)
    alpha = jnp.exp2(m - m_safe)  # 0 while no split had a key
    w = jnp.exp2(lse_c - m_safe[None, :])  # 0 for empty splits
    return (acc * alpha[:, None] + jnp.sum(w[:, :, None] * o_c, axis=0),
            l * alpha + jnp.sum(w, axis=0), m_next)

  carry = (jnp.zeros((cr, hp), jnp.float32), jnp.zeros((cr,), jnp.float32),
           jnp.full((cr,), -jnp.inf, jnp.float32))
  starts = list(range(0, splits, chunk))
  group = max(1, MERGE_INFLIGHT * 32 * num_warps // (chunk * cr * hp))
  for g in range(0, len(starts), group):
    parts = [load(f, min(chunk, pl.next_power_of_2(splits - f)))
             for f in starts[g:g + group]]
    for part in parts:
      carry = fold(carry, *part)
  acc, l, m = carry
  seen = l > 0
  l_safe = jnp.where(seen, l, 1.0)
  lse = jnp.where(seen, (m + jnp.log2(l_safe)) * tiles.LN2, jnp.inf)
  tiles.store_rows(o_ref.at[pl.ds(0, cr), :], acc / l_safe[:, None], r0, cr,
                   rows, head_dim)
  plgpu.store(lse_ref.at[pl.ds(0, cr)], lse, mask=r0 + jnp.arange(cr) < rows)


def _split_kv(q, k, v, table, arrays: masks.MaskArrays, params: KernelParams,
              *, s: int, page_size: int | None):
  """Runs the split-KV kernel (one launch, merge included); returns (out
  [B, T, N, H], lse [B, N, T] natural log, +inf on fully masked rows)."""
  b, t, n, h = q.shape
  kh = k.shape[2]
  group = n // kh
  rows = t * group
  cfg = params.config or DecodeConfig()
  block_r = max(16, min(cfg.block_rows, pl.next_power_of_2(rows)))
  hp = pl.next_power_of_2(max(h, 16))
  row_tiles = pl.cdiv(rows, block_r)
  cfg = launch(cfg, programs=b * kh * row_tiles, s=s, head_dim_padded=hp,
               itemsize=q.dtype.itemsize)
  block_k, splits = cfg.block_k, cfg.num_splits
  # [B, T, N, H] -> [B, K, T * G, H]: row r = t * G + g of kv head k
  q_rows = q.reshape(b, t, kh, group, h).transpose(0, 2, 1, 3, 4).reshape(
      b, kh, rows, h)
  # Grid (row tiles x splits, B, K), CUDA's x axis (program_id(0)) varying
  # fastest; with ``heads_first`` the kv heads come first, so the K programs
  # of one (batch, split) start together and read the same [block_k, K, H]
  # rows of the cache (2 KiB per key for K = 8, d128 bf16) at about the same
  # time.  ``spec`` takes index maps of (i, bi, hi) either way.
  if cfg.heads_first:
    grid = (kh, row_tiles * splits, b)
    spec = lambda block, f: pl.BlockSpec(block, lambda hi, i, bi: f(i, bi, hi))
  else:
    grid = (row_tiles * splits, b, kh)
    spec = pl.BlockSpec
  length = spec((None,), lambda i, bi, hi: (bi,))  # one scalar per batch
  # Lengths and shift as given ([B] int32; a constant zero shift when there
  # is none): the kernel clamps them and places the diagonal.
  q_len, kv_len = (x.astype(jnp.int32) for x in (arrays.q_len, arrays.kv_len))
  shift = (jnp.zeros((b,), jnp.int32) if arrays.diagonal_shift is None
           else arrays.diagonal_shift.astype(jnp.int32))
  if page_size is None:
    kv_spec = spec((None, s, None, hp), lambda i, bi, hi: (bi, 0, hi, 0))
    table_ops, table_specs = [], []
  else:
    pages = k.shape[0]
    kv_spec = spec((pages, page_size, None, hp), lambda i, bi, hi: (0, 0, hi, 0))
    table_ops = [table]
    table_specs = [spec((None, table.shape[1]), lambda i, bi, hi: (bi, 0))]
  kernel = functools.partial(
      _decode_kernel, spec=params.spec, scale=params.scale,
      cap=params.logits_soft_cap, group=group, t=t, s=s, block_r=block_r,
      block_k=block_k, head_dim=h, splits=splits, page_size=page_size,
      interpret=params.interpret, part_axis=1 if cfg.heads_first else 0,
      num_warps=cfg.num_warps)
  row_tile = lambda i, bi, hi: (bi, hi, i // splits)
  out_specs = [  # final out [B, K, R, H] and lse [B, K, R]: one row tile
      spec((None, None, block_r, hp), lambda *g: (*row_tile(*g), 0)),
      spec((None, None, block_r), row_tile)]
  out_shape = [jax.ShapeDtypeStruct((b, kh, rows, h), q.dtype),
               jax.ShapeDtypeStruct((b, kh, rows), jnp.float32)]
  ticket_ops, ticket_specs, aliases = [], [], {}
  if splits > 1:
    # Partials of all splits of a row tile ([splits, block_r, Hp] f32 and
    # [splits, block_r], padded rows and columns included) and one ticket
    # counter per (batch, kv head, row tile), zeroed for each call.  The
    # splits axis is rounded up to a power of two: the merge's masked
    # power-of-two loads then stay inside the buffer (JAX >= 0.12 rejects a
    # static slice past a Ref's shape); the extra rows are never written or
    # read.
    padded = row_tiles * block_r
    splits_p = pl.next_power_of_2(splits)
    ticket_spec = spec((None, None, row_tiles), lambda i, bi, hi: (bi, hi, 0))
    out_specs += [
        spec((None, None, splits_p, block_r, hp),
             lambda i, bi, hi: (bi, hi, 0, i // splits, 0)),
        spec((None, None, splits_p, block_r),
             lambda i, bi, hi: (bi, hi, 0, i // splits)),
        ticket_spec]
    out_shape += [
        jax.ShapeDtypeStruct((b, kh, splits_p, padded, hp), jnp.float32),
        jax.ShapeDtypeStruct((b, kh, splits_p, padded), jnp.float32),
        jax.ShapeDtypeStruct((b, kh, row_tiles), jnp.int32)]
    ticket_ops = [jnp.zeros((b, kh, row_tiles), jnp.int32)]
    ticket_specs = [ticket_spec]
    aliases = {6 + len(table_ops): 4}
  out, lse, *_ = pl.pallas_call(
      _bind_refs(kernel, paged=page_size is not None, split=splits > 1),
      grid=grid,
      in_specs=[
          spec((None, None, rows, hp), lambda i, bi, hi: (bi, hi, 0, 0)),
          kv_spec, kv_spec, length, length, length, *table_specs, *ticket_specs],
      out_specs=out_specs,
      out_shape=out_shape,
      input_output_aliases=aliases,
      compiler_params=plgpu.CompilerParams(num_warps=cfg.num_warps,
                                           num_stages=cfg.num_stages),
      interpret=params.interpret,
      name="pallas_flash_decode" if page_size is None else "pallas_flash_paged_decode",
  )(q_rows, k, v, q_len, kv_len, shift, *table_ops, *ticket_ops)
  out = out.reshape(b, kh, t, group, h).transpose(0, 2, 1, 3, 4).reshape(b, t, n, h)
  lse = lse.reshape(b, kh, t, group).transpose(0, 1, 3, 2).reshape(b, n, t)
  return out, lse


def _bind_refs(kernel, *, paged: bool, split: bool):
  """Positional refs (inputs: q, k, v, q_len, kv_len, shift[, table][,
  ticket in];
  outputs: o, lse[, partial o, partial lse, ticket]) -> ``_decode_kernel``'s,
  None for the absent ones (the aliased ticket input is not used)."""
  def call(*refs):
    q_ref, k_ref, v_ref, q_len_ref, kv_len_ref, shift_ref, *rest = refs
    table_ref = rest.pop(0) if paged else None
    if split:
      _, o_ref, lse_ref, part_o_ref, part_lse_ref, ticket_ref = rest
    else:
      (o_ref, lse_ref), part_o_ref, part_lse_ref, ticket_ref = rest, None, None, None
    kernel(q_ref, k_ref, v_ref, q_len_ref, kv_len_ref, shift_ref, table_ref,
           o_ref, lse_ref, part_o_ref, part_lse_ref, ticket_ref)
  return call


def forward(q, k, v, arrays: masks.MaskArrays, params: KernelParams):
  """Backend contract of ``params.py`` over a contiguous [B, S, K, H] cache:
  (out [B, T, N, H], lse [B, N, T] f32, +inf on fully masked rows)."""
  return _split_kv(q, k, v, None, arrays, params, s=k.shape[1], page_size=None)


def paged_forward(q, k_pages, v_pages, block_table, arrays: masks.MaskArrays,
                  params: KernelParams):
  """As ``forward`` over pages [P, page_size, K, H] and a block table
  [B, max_pages] int32; S = max_pages * page_size."""
  page_size = k_pages.shape[1]
  return _split_kv(q, k_pages, v_pages, block_table.astype(jnp.int32), arrays,
                   params, s=block_table.shape[1] * page_size,
                   page_size=page_size)
