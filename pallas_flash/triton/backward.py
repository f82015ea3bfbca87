"""Pallas-Triton backward: FlashAttention-2 Algorithm 2, without atomics.

* delta = rowsum(dO * O)  (Alg. 2 line 4; an O(N) XLA fusion).
* dK/dV kernel, grid ``(cdiv(S, block_k), B, K)``: one program holds a
  [block_k, H] K/V tile, loops over the G query heads of its kv head and over
  the query tiles that can see it, recomputing P = exp(S - lse) per tile:
  dV += P^T dO, dS = P * (dO V^T - delta), dK += dS^T Q (lines 11-16).
  GQA gradients are summed in registers, so no atomics and bitwise-identical
  results run to run.
* dQ kernel, grid ``(cdiv(T, block_q), B, N)``: one program holds a
  [block_q, H] Q tile and loops over K/V tiles: dQ += dS K (line 15).

Both kernels visit only the tiles the forward visited (same ``masks``
bounds) and apply element-wise masks on edge tiles only.

Bias, ALiBi and dropout: the score tiles get the forward's terms again
(``tiles.add_score_terms``) and the dropout bits are regenerated from their
hash (``tiles.dropout_keep``), nothing N x N is stored.  With keep mask Z and
r = 1 / (1 - rate): dV += (Z r P)^T dO, dP = Z r (dO V^T), dS = P (dP -
delta); delta = rowsum(dO * O) is unchanged.  The r leaves the tile loops:
dS = r (Z P * dO V^T - P * delta'), delta' = (1 - rate) delta (scaled once
in XLA), so a score pays one select (Z P) besides its keep bit, and dV, dK,
dQ and the dbias partials are scaled by r once per program.

dbias (only when ``params.bias_grad``) is dS = P (dP - delta), the gradient
of the logits after soft-capping, computed deterministically (no atomics)
where the bias's shape lets a program own its sum:
* bias constant along keys (Sb = 1): dbias = sum_j P_ij (dP_ij - delta_i)
  = 0 exactly (softmax is shift invariant; delta_i = sum_j P_ij dP_ij, with
  dropout too), so no work: zeros;
* bias constant along queries (Tb = 1, e.g. [B, 1, 1, S]): the dK/dV kernel
  sums dS^T over its query tiles, per query head, in registers:
  a [B, N, 1, S] f32 partial;
* Tb = T, Sb = S: the dQ kernel writes each [block_q, block_k] dS tile (and
  zeros for the tiles it skips) into a [B, N, T, S] partial in the bias's
  dtype (for a full-shape bias it *is* dbias).
``_vjp`` then sums the partial over the bias's broadcast B / N dims in XLA
(in f32).  So a bias broadcast over B or N but full in (T, S) costs a
[B, N, T, S] buffer in the backward (the forward never expands it) and one
rounding to the bias dtype per summand.
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
from pallas_flash.params import KernelParams, row_delta
from pallas_flash.triton import tiles
from pallas_flash.triton.forward import kv_tile_loops


def _ds(p, dp, delta, th, cap, p_kept=None):
  """(dS of the logits, dS of scale * q k^T): P * (dP - delta) (Alg. 2
  line 14), then through the soft-cap's tanh.  With dropout ``p_kept`` is
  Z P, ``dp`` the undropped dO V^T and ``delta`` is delta': the result is
  dS / r (module docstring)."""
  ds_logits = p * (dp - delta) if p_kept is None else p_kept * dp - p * delta
  if cap is None:
    return ds_logits, ds_logits
  return ds_logits, ds_logits * (1.0 - th * th)


def _split_refs(refs, num_outputs: int):
  """(TileInputs, output refs) of a kernel's ``*refs``."""
  return tiles.TileInputs(*refs[:-num_outputs]), refs[-num_outputs:]


def _dkdv_kernel(q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, *refs,
                 spec: masks.MaskSpec, scale: float, cap: float | None,
                 block_q: int, block_k: int, head_dim: int, t: int, s: int,
                 group: int, rate: float, dbias: bool):
  inputs, out_refs = _split_refs(refs, 3 if dbias else 2)
  dk_ref, dv_ref = out_refs[:2]
  r = 1.0 / (1.0 - rate)  # dropout's scale, applied to the sums
  lens_ref, q_seg_ref = inputs.lens, inputs.q_seg
  tile_k, kv_head = pl.program_id(0), pl.program_id(2)
  multi_head_bias = inputs.bias is not None and inputs.bias.ndim == 3  # [G, Tb, Sb]
  k_start = tile_k * block_k
  q_len, kv_len, offset = lens_ref[0], lens_ref[1], lens_ref[2]
  k = tiles.load_rows(k_ref, k_start, block_k, s, head_dim)  # [block_k, Hp]
  v = tiles.load_rows(v_ref, k_start, block_k, s, head_dim)
  first, last, full_first, full_last = masks.tile_range(
      *masks.q_bounds(spec, k_start, k_start + block_k, q_len, kv_len, offset),
      block_q)
  first = jnp.where(k_start < kv_len, first, last)  # tile past kv_len: no work
  if spec.needs_elementwise:
    full_first = full_last = last
  drop_cols = (tiles.dropout_col_keys(inputs, k_start, block_k, s)
               if rate > 0.0 else None)

  def body(tile_q, carry, *, g, masked: bool):
    dk, dv, *db = carry  # db: the [block_k] dbias sum when dbias
    q_start = tile_q * block_q
    q_head = kv_head * group + g  # of the [N] slopes
    q = tiles.load_rows(q_ref, q_start, block_q, t, head_dim, head=g)
    do = tiles.load_rows(do_ref, q_start, block_q, t, head_dim, head=g)
    lse2 = tiles.load_vec(lse_ref, q_start, block_q, t, jnp.inf, head=g) * tiles.LOG2E
    delta = tiles.load_vec(delta_ref, q_start, block_q, t, 0.0, head=g)
    # Key-major tile (Triton tutorial 06): S^T = K Q^T, so that dV += P^T dO
    # and dK += dS^T Q need no transposes of the [block_k, block_q] tiles.
    s2t, tht = tiles.scores(k, q, scale=scale, cap=cap)  # [block_k, block_q]
    s2t = tiles.add_score_terms(s2t, inputs, q_start=q_start, k_start=k_start,
                                t=t, s=s, offset=offset, q_head=q_head,
                                head=g if multi_head_bias else None,
                                key_major=True)
    if masked:
      q_seg = (tiles.load_vec(q_seg_ref, q_start, block_q, t, -1)
               if spec.has_segments else None)
      nm = spec.dense_mask_shape[1] if spec.dense_mask_shape else 1
      ok = tiles.tile_visible(spec, inputs, q_start=q_start, k_start=k_start,
                              block_q=block_q, block_k=block_k, t=t, s=s,
                              q_len=q_len, kv_len=kv_len, offset=offset,
                              q_seg=q_seg, head=g if nm > 1 else None,
                              key_major=True)
      s2t = jnp.where(ok, s2t, masks.MASK_VALUE)
    pt = jnp.exp2(s2t - lse2[None, :])  # P^T (Alg. 2 line 11); 0 on empty rows
    dpt = tiles.dot(v, do, trans_b=True)  # dP^T [block_k, block_q]
    pdt = None  # Z P^T with dropout (dV and dS scaled by r after the loops)
    if rate > 0.0:
      drop_rows = tiles.dropout_row_keys(inputs, q_start, block_q, t, head=g)
      pdt = jnp.where(tiles.dropout_keep(drop_rows, drop_cols, rate,
                                         key_major=True), pt, 0.0)
    dv = dv + tiles.dot((pt if pdt is None else pdt).astype(do.dtype), do)  # [block_k, Hp]
    dst_logits, dst = _ds(pt, dpt, delta[None, :], tht, cap, pdt)
    dk = dk + tiles.dot(dst.astype(q.dtype), q)
    if dbias:  # bias constant along queries: sum dS^T over them
      db = [db[0] + jnp.sum(dst_logits, axis=1)]
    return dk, dv, *db

  def group_body(g, carry):
    def masked_body(tile_q, c):
      fn = functools.partial(body, g=g, masked=True)
      if not spec.has_segments:
        return fn(tile_q, c)
      overlap = tiles.segments_overlap(inputs.q_seg_lo[tile_q], inputs.q_seg_hi[tile_q],
                                       inputs.kv_seg_lo[tile_k], inputs.kv_seg_hi[tile_k])
      return lax.cond(overlap, fn, lambda _, c: c, tile_q, c)
    if dbias:
      carry = (*carry, jnp.zeros((block_k,), jnp.float32))
    carry = lax.fori_loop(first, full_first, masked_body, carry)
    carry = lax.fori_loop(full_first, full_last,
                          functools.partial(body, g=g, masked=False), carry)
    dk, dv, *db = lax.fori_loop(full_last, last, masked_body, carry)
    if dbias:  # row g of the [G, block_k] partial block
      k_idx = k_start + jnp.arange(block_k)
      plgpu.store(out_refs[2].at[g, pl.ds(0, block_k)], db[0] * r,
                  mask=k_idx < s)
    return dk, dv

  hp = k_ref.shape[-1]
  zeros = jnp.zeros((block_k, hp), jnp.float32)
  dk, dv = lax.fori_loop(0, group, group_body, (zeros, zeros))
  tiles.store_rows(dk_ref, dk * (scale * r), k_start, block_k, s, head_dim)
  tiles.store_rows(dv_ref, dv * r if rate > 0.0 else dv, k_start, block_k, s,
                   head_dim)


def _dq_kernel(q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, *refs,
               spec: masks.MaskSpec, scale: float, cap: float | None,
               block_q: int, block_k: int, head_dim: int, t: int, s: int,
               rate: float, dbias: bool):
  inputs, out_refs = _split_refs(refs, 2 if dbias else 1)
  dq_ref = out_refs[0]
  r = 1.0 / (1.0 - rate)  # dropout's scale, applied to the sums
  q_head = pl.program_id(2)
  qtile = tiles.program_query_tile(spec, inputs.lens, block_q)
  tile_q, q_start, q_end, _, kv_len, offset = qtile
  q = tiles.load_rows(q_ref, q_start, block_q, t, head_dim)
  do = tiles.load_rows(do_ref, q_start, block_q, t, head_dim)
  lse2 = tiles.load_vec(lse_ref, q_start, block_q, t, jnp.inf) * tiles.LOG2E
  delta = tiles.load_vec(delta_ref, q_start, block_q, t, 0.0)
  q_seg = (tiles.load_vec(inputs.q_seg, q_start, block_q, t, -1)
           if spec.has_segments else None)
  rows_in = (q_start + jnp.arange(block_q)) < t
  drop_rows = (tiles.dropout_row_keys(inputs, q_start, block_q, t)
               if rate > 0.0 else None)

  def store_plane(tile_k, ds_logits):  # dS tile into the [block_q, S] block
    k_start = tile_k * block_k
    cols_in = (k_start + jnp.arange(block_k)) < s
    plgpu.store(out_refs[1].at[:, pl.ds(k_start, block_k)],
                (ds_logits * r if rate > 0.0 else ds_logits).astype(out_refs[1].dtype),
                mask=rows_in[:, None] & cols_in[None, :])

  def body(tile_k, dq, *, masked: bool):
    k_start = tile_k * block_k
    k = tiles.load_rows(k_ref, k_start, block_k, s, head_dim)
    v = tiles.load_rows(v_ref, k_start, block_k, s, head_dim)
    s2, th = tiles.scores(q, k, scale=scale, cap=cap)
    s2 = tiles.add_score_terms(s2, inputs, q_start=q_start, k_start=k_start,
                               t=t, s=s, offset=offset, q_head=q_head)
    if masked:
      s2 = tiles.mask_scores(s2, spec, inputs, qtile, k_start,
                             block_k=block_k, t=t, s=s, q_seg=q_seg)
    p = jnp.exp2(s2 - lse2[:, None])
    dp = tiles.dot(do, v, trans_b=True)
    p_kept = None  # Z P with dropout (dS / r; dQ scaled by r after the loop)
    if rate > 0.0:
      drop_cols = tiles.dropout_col_keys(inputs, k_start, block_k, s)
      p_kept = jnp.where(tiles.dropout_keep(drop_rows, drop_cols, rate), p, 0.0)
    ds_logits, ds = _ds(p, dp, delta[:, None], th, cap, p_kept)
    if dbias:
      store_plane(tile_k, ds_logits)
    return dq + tiles.dot(ds.astype(k.dtype), k)

  def skip(tile_k, dq):  # a tile no query row sees: dS = 0
    if dbias:
      store_plane(tile_k, jnp.zeros((block_q, block_k), jnp.float32))
    return dq

  def masked_body(tile_k, dq):
    if not spec.has_segments:
      return body(tile_k, dq, masked=True)
    overlap = tiles.segments_overlap(inputs.q_seg_lo[tile_q], inputs.q_seg_hi[tile_q],
                                     inputs.kv_seg_lo[tile_k], inputs.kv_seg_hi[tile_k])
    return lax.cond(overlap, functools.partial(body, masked=True), skip,
                    tile_k, dq)

  first, full_first, full_last, last = kv_tile_loops(
      spec, q_start, q_end, kv_len, offset, block_k)
  dq = jnp.zeros((block_q, q_ref.shape[-1]), jnp.float32)
  if dbias:  # the program owns its [block_q, S] dS block: zero what it skips
    dq = lax.fori_loop(0, first, skip, dq)
  dq = lax.fori_loop(first, full_first, masked_body, dq)
  dq = lax.fori_loop(full_first, full_last, functools.partial(body, masked=False), dq)
  dq = lax.fori_loop(full_last, last, masked_body, dq)
  if dbias:
    dq = lax.fori_loop(last, pl.cdiv(s, block_k), skip, dq)
  tiles.store_rows(dq_ref, dq * (scale * r), q_start, block_q, t, head_dim)


def backward(q, k, v, arrays: masks.MaskArrays, out, lse, d_out,
             params: KernelParams, *, delta=None):
  """(dq, dk, dv) for the forward of ``forward.forward``; lse [B, N, T].

  With ``params.bias_grad`` also the dbias partial (see the module docstring).
  ``delta``: rowsum(dO * O) [B, N, T] float32 computed by the caller (then
  ``out`` is not read and may be None); dropout's scaling still applies.
  """
  b, t, n, h = q.shape
  _, s, kh, _ = k.shape
  group = n // kh
  # A MosaicConfig (implementation="mosaic") tunes only the forward.
  cfg = params.config if isinstance(params.config, TritonConfig) else None
  cfg = (cfg or TritonConfig.default(h)).fit(t, s)
  hp = pl.next_power_of_2(max(h, 16))
  spec, cap = params.spec, params.logits_soft_cap
  compiler_params = plgpu.CompilerParams(num_warps=cfg.num_warps_bwd,
                                         num_stages=cfg.num_stages_bwd)
  if delta is None:  # delta_i = rowsum(dO_i * O_i)  (Alg. 2 line 4)
    delta = row_delta(out, d_out)
  d_out = d_out.astype(q.dtype)
  rate = params.dropout_rate
  if rate > 0.0:  # delta' of the module docstring
    delta = delta * (1.0 - rate)
  tb, sb = arrays.bias.shape[2:] if params.bias_grad else (None, None)
  dkdv_dbias = params.bias_grad and tb == 1 and sb > 1
  dq_dbias = params.bias_grad and tb > 1 and sb > 1

  # dK, dV: program = (kv tile, batch, kv head), looping over its G query heads.
  bq, bk = cfg.block_q_dkv, cfg.block_k_dkv
  mask_ops, mask_specs = tiles.prepare_mask_inputs(
      arrays, spec, t=t, s=s, block_q=bq, block_k=bk, q_head_block=group)
  q_group = pl.BlockSpec((None, t, group, hp), lambda i, bi, hi: (bi, 0, hi, 0))
  kv_tile = pl.BlockSpec((None, s, None, hp), lambda i, bi, hi: (bi, 0, hi, 0))
  row_group = pl.BlockSpec((None, group, t), lambda i, bi, hi: (bi, hi, 0))
  out_specs = [pl.BlockSpec((None, bk, None, hp), lambda i, bi, hi: (bi, i, hi, 0))] * 2
  out_shape = [jax.ShapeDtypeStruct(k.shape, k.dtype),
               jax.ShapeDtypeStruct(v.shape, v.dtype)]
  if dkdv_dbias:  # [B, N, S] column sums, a [G, block_k] block per program
    out_specs.append(pl.BlockSpec((None, group, bk), lambda i, bi, hi: (bi, hi, i)))
    out_shape.append(jax.ShapeDtypeStruct((b, n, s), jnp.float32))
  dkdv = pl.pallas_call(
      functools.partial(_dkdv_kernel, spec=spec, scale=params.scale, cap=cap,
                        block_q=bq, block_k=bk, head_dim=h, t=t, s=s,
                        group=group, rate=rate, dbias=dkdv_dbias),
      grid=(pl.cdiv(s, bk), b, kh),
      in_specs=[q_group, kv_tile, kv_tile, q_group, row_group, row_group,
                *mask_specs],
      out_specs=out_specs,
      out_shape=out_shape,
      compiler_params=compiler_params,
      interpret=params.interpret,
      name="pallas_flash_bwd_dkdv",
  )(q, k, v, d_out, lse, delta, *mask_ops)

  # dQ: program = (q tile, batch, query head), looping over K/V tiles.
  bq, bk = cfg.block_q_dq, cfg.block_k_dq
  mask_ops, mask_specs = tiles.prepare_mask_inputs(
      arrays, spec, t=t, s=s, block_q=bq, block_k=bk, q_head_block=None)
  q_rows = pl.BlockSpec((None, t, None, hp), lambda i, bi, hi: (bi, 0, hi, 0))
  kv_rows = pl.BlockSpec((None, s, None, hp), lambda i, bi, hi: (bi, 0, hi // group, 0))
  row_vec = pl.BlockSpec((None, None, t), lambda i, bi, hi: (bi, hi, 0))
  nq = pl.cdiv(t, bq)
  tile = lambda i: tiles.query_tile(spec, i, nq)
  out_specs = [pl.BlockSpec((None, bq, None, hp), lambda i, bi, hi: (bi, tile(i), hi, 0))]
  out_shape = [jax.ShapeDtypeStruct(q.shape, q.dtype)]
  if dq_dbias:  # [B, N, T, S], a [block_q, S] block per program
    out_specs.append(pl.BlockSpec((None, None, bq, s), lambda i, bi, hi: (bi, hi, tile(i), 0)))
    out_shape.append(jax.ShapeDtypeStruct((b, n, t, s), arrays.bias.dtype))
  dq = pl.pallas_call(
      functools.partial(_dq_kernel, spec=spec, scale=params.scale, cap=cap,
                        block_q=bq, block_k=bk, head_dim=h, t=t, s=s,
                        rate=rate, dbias=dq_dbias),
      grid=(nq, b, n),
      in_specs=[q_rows, kv_rows, kv_rows, q_rows, row_vec, row_vec, *mask_specs],
      out_specs=out_specs,
      out_shape=out_shape,
      compiler_params=compiler_params,
      interpret=params.interpret,
      name="pallas_flash_bwd_dq",
  )(q, k, v, d_out, lse, delta, *mask_ops)
  grads = (dq[0], *dkdv[:2])
  if dkdv_dbias:
    return (*grads, dkdv[2][:, :, None, :])
  if dq_dbias:
    return (*grads, dq[1])
  if params.bias_grad:  # constant along keys: dbias = 0 (module docstring)
    return (*grads, jnp.zeros((b, n, tb, 1), jnp.float32))
  return grads
