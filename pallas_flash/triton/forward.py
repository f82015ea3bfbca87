"""Pallas-Triton forward: FlashAttention-2 Algorithm 1.

Grid ``(cdiv(T, block_q), B, N)``; one program owns a [block_q, H] query tile,
streams [block_k, H] K/V tiles through SRAM and keeps the running max ``m``,
sum ``l`` and unnormalised output ``acc`` (normalised once at the end, FA-2
section 3.1.1).  The K/V tile loop is split three ways: tiles the position
masks (causal, window, lengths) rule out entirely are never visited, tiles
they cover entirely run without any mask, and only edge tiles pay for the
element-wise mask.  Segment ids add a per-tile [min, max] overlap test that
skips tiles of other documents.  A bias and ALiBi are added to every visited
tile (``tiles.add_score_terms``); dropout zeroes P's dropped entries before
``P V`` (``l`` sums the undropped P, as FlashAttention's dropout does) and the
output is scaled by 1 / (1 - rate) once at the end.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from pallas_flash import masks
from pallas_flash.triton.config import TritonConfig
from pallas_flash.params import KernelParams
from pallas_flash.triton import tiles


def kv_tile_loops(spec: masks.MaskSpec, q_start, q_end, kv_len, offset,
                  block_k: int):
  """(first, full_first, full_last, last) K/V tiles for query rows [q_start, q_end)."""
  first, last, full_first, full_last = masks.tile_range(
      *masks.kv_bounds(spec, q_start, q_end, kv_len, offset), block_k)
  if spec.needs_elementwise:  # every tile needs the segment / dense mask
    full_first = full_last = last
  return first, full_first, full_last, last


def _forward_kernel(q_ref, k_ref, v_ref, *refs, spec: masks.MaskSpec,
                    scale: float, cap: float | None, block_q: int, block_k: int,
                    head_dim: int, t: int, s: int, rate: float):
  *in_refs, o_ref, lse_ref = refs
  inputs = tiles.TileInputs(*in_refs)
  head = pl.program_id(2)
  qtile = tiles.program_query_tile(spec, inputs.lens, block_q)
  tile_q, q_start, q_end, q_len, kv_len, offset = qtile
  q = tiles.load_rows(q_ref, q_start, block_q, t, head_dim)  # [block_q, Hp]
  q_seg = (tiles.load_vec(inputs.q_seg, q_start, block_q, t, -1)
           if spec.has_segments else None)
  drop_rows = (tiles.dropout_row_keys(inputs, q_start, block_q, t)
               if rate > 0.0 else None)

  def body(tile_k, carry, *, masked: bool):
    acc, m_prev, l_prev = carry
    k_start = tile_k * block_k
    k = tiles.load_rows(k_ref, k_start, block_k, s, head_dim)  # [block_k, Hp]
    s2, _ = tiles.scores(q, k, scale=scale, cap=cap)  # [block_q, block_k]
    s2 = tiles.add_score_terms(s2, inputs, q_start=q_start, k_start=k_start,
                               t=t, s=s, offset=offset, q_head=head)
    if masked:
      s2 = tiles.mask_scores(s2, spec, inputs, qtile, k_start,
                             block_k=block_k, t=t, s=s, q_seg=q_seg)
    # -- update m and l (FA-2 Alg. 1 lines 8-10), rescale acc lazily
    m_next = jnp.maximum(m_prev, jnp.max(s2, axis=1))
    alpha = jnp.exp2(m_prev - m_next)
    p = jnp.exp2(s2 - m_next[:, None])
    l_next = l_prev * alpha + jnp.sum(p, axis=1)
    if rate > 0.0:  # dropout on P (rescaled by 1 / (1 - rate) at the end)
      drop_cols = tiles.dropout_col_keys(inputs, k_start, block_k, s)
      p = jnp.where(tiles.dropout_keep(drop_rows, drop_cols, rate), p, 0.0)
    v = tiles.load_rows(v_ref, k_start, block_k, s, head_dim)
    acc = acc * alpha[:, None] + tiles.dot(p.astype(v.dtype), v)
    return acc, m_next, l_next

  def maybe_skip(tile_k, carry):
    # Tiles of documents this query tile does not contain are skipped.
    overlap = tiles.segments_overlap(inputs.q_seg_lo[tile_q], inputs.q_seg_hi[tile_q],
                                     inputs.kv_seg_lo[tile_k], inputs.kv_seg_hi[tile_k])
    return lax.cond(overlap, functools.partial(body, masked=True),
                    lambda _, c: c, tile_k, carry)

  masked_body = maybe_skip if spec.has_segments else functools.partial(body, masked=True)
  head_dim_padded = q_ref.shape[-1]
  carry = (jnp.zeros((block_q, head_dim_padded), jnp.float32),
           jnp.full((block_q,), -jnp.inf, jnp.float32),
           jnp.zeros((block_q,), jnp.float32))
  first, full_first, full_last, last = kv_tile_loops(
      spec, q_start, q_end, kv_len, offset, block_k)
  carry = lax.fori_loop(first, full_first, masked_body, carry)
  carry = lax.fori_loop(full_first, full_last,
                        functools.partial(body, masked=False), carry)
  acc, m, l = lax.fori_loop(full_last, last, masked_body, carry)

  # Rows that saw no key (fully masked, or past q_len) give 0 and lse=+inf.
  rows = q_start + jnp.arange(block_q)
  empty = (m <= masks.MASK_VALUE) | (rows >= q_len)
  l_safe = jnp.where(empty, 1.0, l)
  norm = l_safe * (1.0 - rate) if rate > 0.0 else l_safe  # dropout's 1/(1-rate)
  out = jnp.where(empty[:, None], 0.0, acc / norm[:, None])
  lse = jnp.where(empty, jnp.inf, (m + jnp.log2(l_safe)) * tiles.LN2)
  tiles.store_rows(o_ref, out, q_start, block_q, t, head_dim)
  plgpu.store(lse_ref, lse, mask=rows < t)


def forward(q, k, v, arrays: masks.MaskArrays, params: KernelParams):
  """Backend contract of ``params.py``: (out [B,T,N,H], lse [B,N,T] f32)."""
  b, t, n, h = q.shape
  _, s, kh, _ = k.shape
  group = n // kh
  cfg = (params.config or TritonConfig.default(h)).fit(t, s)
  block_q, block_k = cfg.block_q, cfg.block_k
  hp = pl.next_power_of_2(max(h, 16))
  mask_ops, mask_specs = tiles.prepare_mask_inputs(
      arrays, params.spec, t=t, s=s, block_q=block_q, block_k=block_k,
      q_head_block=None)
  kernel = functools.partial(
      _forward_kernel, spec=params.spec, scale=params.scale,
      cap=params.logits_soft_cap, block_q=block_q, block_k=block_k,
      head_dim=h, t=t, s=s, rate=params.dropout_rate)
  in_specs = [
      pl.BlockSpec((None, t, None, hp), lambda i, bi, hi: (bi, 0, hi, 0)),
      pl.BlockSpec((None, s, None, hp), lambda i, bi, hi: (bi, 0, hi // group, 0)),
      pl.BlockSpec((None, s, None, hp), lambda i, bi, hi: (bi, 0, hi // group, 0)),
      *mask_specs,
  ]
  nq = pl.cdiv(t, block_q)
  tile = lambda i: tiles.query_tile(params.spec, i, nq)
  out_specs = [
      pl.BlockSpec((None, block_q, None, hp), lambda i, bi, hi: (bi, tile(i), hi, 0)),
      pl.BlockSpec((None, None, block_q), lambda i, bi, hi: (bi, hi, tile(i))),
  ]
  out, lse = pl.pallas_call(
      kernel,
      grid=(nq, b, n),
      in_specs=in_specs,
      out_specs=out_specs,
      out_shape=[jax.ShapeDtypeStruct(q.shape, q.dtype),
                 jax.ShapeDtypeStruct((b, n, t), jnp.float32)],
      compiler_params=plgpu.CompilerParams(num_warps=cfg.num_warps,
                                           num_stages=cfg.num_stages),
      interpret=params.interpret,
      name="pallas_flash_fwd",
  )(q, k, v, *mask_ops)
  return out, lse
