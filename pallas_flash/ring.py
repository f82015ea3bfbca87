"""Ring attention (context parallelism) over a mesh axis, for ``shard_map``.

Liu et al. 2023, "Ring Attention with Blockwise Transformers": the sequence
is split into P contiguous chunks over the devices of ``axis_name``; device
i holds query rows and key/value rows of chunk i.  In P steps every device
attends its queries to every K/V chunk while the chunks travel one device
along the ring (``lax.ppermute``; XLA overlaps the transfer of the next
chunk with the current block's kernel).  Partial outputs merge exactly
through their log-sum-exps (FlashAttention-2 Alg. 1's rescaling, one block
at a time):

    lse = logaddexp(lse_a, lse_b),  out = e^(lse_a - lse) out_a + e^(lse_b - lse) out_b

The backward is a ring too: each step runs the kernels' backward on (local
queries, travelling K/V chunk) with the *global* out and lse (so that
P = exp(S - lse) is the final softmax), dQ accumulates locally, and dK/dV
accumulators travel with their chunk, arriving home after P steps.

Causal (top-left, equal chunk lengths): key chunk j is fully visible to
the queries of chunk i > j, causal for j = i, and skipped for j > i.  With a
contiguous split the last device does P blocks and the first one.  The
"zigzag" layout (Brandon et al. 2023, "Striped Attention", and the zig-zag
split of Megatron's context parallelism) cuts the sequence into 2P chunks and
gives device i chunks i and 2P - 1 - i: every device then does one causal
call on its share at its own step and one half-size full call at each other
step (``_plan``).  Each step is one kernel call (a ``lax.cond`` picks which
where it depends on the device), so the kernels run on large blocks.

Bottom-right causal with lengths: query row i of batch row b sees key
j <= i + Lk[b] - Lq[b] (whole lengths), so the diagonal's place in a block
is known per batch row at run time only.  Every step then runs each block
of consecutive positions (contiguous: the shares; zigzag: the four pairs of
chunks) causal top-left with a per-row ``MaskArrays.diagonal_shift`` of
qs - ks + Lk[b] - Lq[b] (qs, ks: the block's first query / key position),
which the kernels add to their diagonal and tile bounds, and a ``lax.cond``
skips the blocks where no batch row has a visible pair (``_run``).

Letters: B batch, T / S local query / key chunk length, N / K query / kv
heads, H head dim; layout [B, T, N, H] as everywhere.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
from jax import lax
import jax.numpy as jnp

from pallas_flash import _dispatch, masks
from pallas_flash.params import KernelParams


def ring_attention(query, key, value, *, axis_name, is_causal: bool = False,
                   layout: str = "contiguous", scale: float | None = None,
                   query_seq_lengths=None, key_value_seq_lengths=None,
                   query_segment_ids=None, key_value_segment_ids=None,
                   causal_alignment: masks.CausalAlignment = "top_left",
                   logits_soft_cap: float | None = None,
                   implementation: str | None = None, config=None):
  """Attention over a sequence split across the devices of ``axis_name``.

  Call inside ``jax.shard_map`` (with ``check_vma=False``) where q, k, v
  are each device's share of the sequence along axis 1.

  Args:
    query: ``[B, T, N, H]``, this device's query rows.
    key, value: ``[B, S, K, H]``, this device's key / value rows
      (N % K == 0).
    axis_name: the mesh axis the sequence is split over (P devices).
    is_causal: causal over the whole sequence (needs T == S).
    layout: how the sequence is split.  ``"contiguous"``: device i holds
      chunk i of P.  ``"zigzag"``: the sequence is cut into 2P chunks and
      device i holds chunks i and 2P - 1 - i (put a global array in that
      order with ``zigzag(x, P)`` before sharding it, and the output back
      with ``zigzag(out, P, inverse=True)``); with ``is_causal`` every
      device then does the same work (Brandon et al. 2023's balancing).
    scale: default ``1 / sqrt(H)``.
    query_seq_lengths, key_value_seq_lengths: int32 ``[B]``, lengths of the
      *whole* sequence (the same on every device): rows / keys at global
      positions ``>= length`` are padding.
    query_segment_ids: int ``[B, T]``, this device's share of the packed
      sequence ids (in the layout of ``query``); negative ids are padding.
    key_value_segment_ids: int ``[B, S]``, this device's share for the
      keys; defaults to ``query_segment_ids``.  They travel round the ring
      with their K/V share.
    causal_alignment: ``"top_left"`` or ``"bottom_right"`` (query row i
      of batch row b sees keys ``j <= i + kv_len[b] - q_len[b]`` of the
      whole lengths, as ``flash_attention``); the same diagonal for equal
      whole lengths.
    logits_soft_cap: ``cap * tanh(logits / cap)``.
    implementation: ``None`` (Mosaic GPU on Hopper, else Pallas-Triton;
      interpret mode on a CPU), ``"triton"`` or ``"mosaic"``.
    config: backend config, as for ``flash_attention``.

  Returns:
    ``[B, T, N, H]``: this device's rows of the output, in the layout of
    ``query``.

  Raises:
    ValueError: malformed input (as ``flash_attention``), an unknown
      layout, causal with T != S, or a zigzag share of odd length.
    NotImplementedError: ``implementation="xla"`` (no block backward with
      a given lse), or a backend that cannot take the input.
  """
  q, k, v, arrays, spec, scale, cap, squeeze = _dispatch.validate(
      query, key, value, None, None, scale, is_causal, query_seq_lengths,
      key_value_seq_lengths, None, implementation, causal_alignment,
      query_segment_ids, key_value_segment_ids, logits_soft_cap)
  if squeeze:
    raise ValueError(f"ring_attention takes [B, T, N, H] shares, got query "
                     f"{jnp.shape(query)}")
  if layout not in ("contiguous", "zigzag"):
    raise ValueError(f"layout={layout!r} must be 'contiguous' or 'zigzag'")
  if is_causal and q.shape[1] != k.shape[1]:
    raise ValueError(f"causal ring attention needs equal chunks, got query "
                     f"rows {q.shape[1]} and key rows {k.shape[1]}")
  if layout == "zigzag" and (q.shape[1] % 2 or k.shape[1] % 2):
    raise ValueError(f"layout='zigzag' holds two chunks per device: query "
                     f"rows {q.shape[1]} and key rows {k.shape[1]} must be "
                     "even")
  if implementation == "xla":
    raise NotImplementedError("ring_attention runs the kernels "
                              "(implementation 'triton' or 'mosaic')")
  lengths = (query_seq_lengths, key_value_seq_lengths)
  mask = _Mask(*(a if x is not None else None for a, x in
                 zip(arrays[:2], lengths)), *arrays[2:4])
  # The kernels' params of a non-causal block.
  params = _dispatch.plan(q, k, v, None,
                          masks.MaskSpec(has_segments=spec.has_segments),
                          scale, cap, 0.0, implementation, config, ring=True)
  # Bottom-right equals top-left for equal whole lengths (T == S here); with
  # lengths given the diagonal sits per batch row (``_Static.per_row``).
  per_row = (is_causal and spec.bottom_right
             and any(x is not None for x in lengths))
  return _ring(_Static(params, axis_name, is_causal, layout == "zigzag",
                       per_row), q, k, v, mask)


def takes(params: KernelParams, q, k) -> bool:
  """Whether the ring runs ``flash_attention``'s call for sharding.py: equal
  T and S, a kernel backend, and a mask it can split (no window, no dense
  mask)."""
  spec = params.spec
  return (params.forward in ("triton", "mosaic") and q.shape[1] == k.shape[1]
          and spec.window is None and spec.dense_mask_shape is None)


def backend_calls(params: KernelParams, axis_name):
  """(forward, backward) of a contiguous ring over ``axis_name`` with the
  kernels' backend signatures (``params.py``), for sharding.py's per-shard
  calls of a T- and S-sharded input under ``jit``: forward(q, k, v, arrays)
  -> (out, lse +inf on rows that see no key); backward(q, k, v, arrays, out,
  lse, d_out) -> (dq, dk, dv).  ``arrays`` holds the whole lengths (always
  given: bottom-right causal runs per-row diagonals) and the local segment
  ids."""
  spec = params.spec
  static = _Static(
      dataclasses.replace(params, spec=masks.MaskSpec(
          has_segments=spec.has_segments)),
      axis_name, spec.is_causal, zigzag=False,
      per_row=spec.is_causal and spec.bottom_right)
  mask = lambda a: _Mask(a.q_len, a.kv_len, a.q_segment_ids,
                         a.kv_segment_ids)
  fwd = lambda q, k, v, arrays: _forward(static, q, k, v, mask(arrays))
  bwd = lambda q, k, v, arrays, out, lse, d_out: _ring_bwd(
      static, (q, k, v, mask(arrays), out, lse), d_out)[:3]
  return fwd, bwd


def zigzag(x, num_devices: int, *, axis: int = 1, inverse: bool = False):
  """Reorders a global sequence axis for ``layout="zigzag"``: chunks
  (0, 2P-1, 1, 2P-2, ...), so that a contiguous split over P devices gives
  device i chunks i and 2P - 1 - i.  ``inverse=True`` undoes it."""
  p2 = 2 * num_devices
  if x.shape[axis] % p2:
    raise ValueError(f"axis {axis} of length {x.shape[axis]} must be a "
                     f"multiple of 2 * num_devices = {p2}")
  order = [c for i in range(num_devices) for c in (i, p2 - 1 - i)]
  if inverse:
    order = [order.index(c) for c in range(p2)]
  chunks = jnp.split(x, p2, axis=axis)
  return jnp.concatenate([chunks[c] for c in order], axis=axis)


class _Mask(NamedTuple):
  """Whole-sequence lengths ([B], None: no padding) and the local segment
  ids ([B, T] / [B, S] shares, or None)."""
  q_len: jax.Array | None
  kv_len: jax.Array | None
  q_seg: jax.Array | None
  kv_seg: jax.Array | None


@dataclasses.dataclass(frozen=True)
class _Static:
  params: KernelParams  # of a non-causal block
  axis_name: str
  is_causal: bool
  zigzag: bool
  # Causal bottom-right with lengths: the diagonal of batch row b sits at
  # kv_len[b] - q_len[b], known at run time only; every block runs causal
  # with its rows' ``MaskArrays.diagonal_shift`` (``_arrays``).
  per_row: bool = False


@dataclasses.dataclass(frozen=True)
class _Block:
  """One kernel call: query rows x key rows of the local share (``None``:
  all rows, 0 / 1: the first / second half), causal diagonal or none."""
  q_part: int | None = None
  kv_part: int | None = None
  causal: bool = False


def _block_params(static: _Static, causal: bool) -> KernelParams:
  """A block with a causal diagonal (top-left) or without a mask."""
  return dataclasses.replace(static.params, spec=dataclasses.replace(
      static.params.spec, is_causal=causal))


def _plan(static: _Static, step: int):
  """(pred, block, other) of ring step ``step`` (keys of device me - step):
  ``block`` where ``pred`` (None: always), else ``other`` (None: skip).

  Causal, step 0: the local share against itself is causal top-left, in
  both layouts (zigzag: the share's second chunk sees all of its first).
  Later steps bring the keys of device src = me - step (mod P), which lie
  before the local queries iff me >= step.  Contiguous: then fully visible,
  else skipped.  Zigzag (chunks me, 2P-1-me against src, 2P-1-src): either
  all queries see the first key chunk, or the second query chunk sees both;
  one half-size call either way (Brandon et al. 2023's balance).
  """
  if not static.is_causal:
    return None, _Block(), None
  if step == 0:
    return None, _Block(causal=True), None
  earlier = lax.axis_index(static.axis_name) >= step
  if not static.zigzag:
    return earlier, _Block(), None
  return earlier, _Block(kv_part=0), _Block(q_part=1)


def _per_row_blocks(static: _Static):
  """The blocks of every step where the diagonal is per batch row
  (``_Static.per_row``): each is causal with its own shift, on a span of
  consecutive positions (zigzag: the four chunk pairs of the two shares)."""
  if not static.zigzag:
    return (_Block(causal=True),)
  return tuple(_Block(qp, kp, causal=True) for qp in (0, 1) for kp in (0, 1))


def _half(x, part, axis=1):
  if part is None:
    return x
  return jnp.split(x, 2, axis=axis)[part]


def _put(x, part, value, axis=1):
  """``x`` with ``_half(x, part, axis)`` replaced by ``value``."""
  if part is None:
    return value
  halves = jnp.split(x, 2, axis=axis)
  halves[part] = value
  return jnp.concatenate(halves, axis=axis)


def _start(static: _Static, device, part, rows: int):
  """Global position of the first row of a block of consecutive positions:
  ``device``'s share (contiguous, ``part`` None) or its chunk ``part``
  (zigzag: chunks device and 2P - 1 - device), ``rows`` long."""
  if not static.zigzag:
    return device * rows
  last = 2 * lax.axis_size(static.axis_name) - 1
  return (device if part == 0 else last - device) * rows


def _local_length(static: _Static, length, device, part, rows: int):
  """Rows of a block (``part`` of ``device``'s share, ``rows`` long) below
  the whole-sequence ``length`` [B] (None: all).  Within a share global
  positions increase (zigzag: chunk 2P-1-i follows chunk i), so the valid
  rows are a prefix of the block: the kernels' length mask."""
  if length is None:
    return None
  if static.zigzag and part is None:  # both chunks of the share
    return sum(_local_length(static, length, device, c, rows // 2)
               for c in (0, 1))
  return jnp.clip(length - _start(static, device, part, rows), 0, rows)


def _arrays(static: _Static, mask: _Mask, blk: _Block, src, q, k, kv_seg):
  """The kernels' MaskArrays of block ``blk`` (of the local queries ``q``
  and the keys ``k`` of device ``src``, whole shares).

  Per-row diagonal (bottom-right with whole lengths Lq, Lk clipped to the
  whole sequence, as the single-device call clips them): global query row
  qs + r sees key ks + c iff ks + c <= qs + r + Lk - Lq, i.e. a top-left
  diagonal shifted by qs - ks + Lk - Lq; the key length mask is implied by
  it for every row below Lq.
  """
  me = lax.axis_index(static.axis_name)
  (b, t), s = q.shape[:2], k.shape[1]
  tq, sk = (t if blk.q_part is None else t // 2,
            s if blk.kv_part is None else s // 2)
  q_len = _local_length(static, mask.q_len, me, blk.q_part, tq)
  kv_len = _local_length(static, mask.kv_len, src, blk.kv_part, sk)
  segs = (None, None) if mask.q_seg is None else (
      _half(mask.q_seg, blk.q_part), _half(kv_seg, blk.kv_part))
  shift = None
  if static.per_row:
    p = lax.axis_size(static.axis_name)
    whole = lambda x, n: n if x is None else jnp.clip(x, 0, n)
    shift = (whole(mask.kv_len, p * s) - whole(mask.q_len, p * t)
             + _start(static, me, blk.q_part, tq)
             - _start(static, src, blk.kv_part, sk))
    shift = jnp.broadcast_to(shift, (b,)).astype(jnp.int32)
  full = lambda n: jnp.full((b,), n, jnp.int32)
  return masks.MaskArrays(
      full(tq) if q_len is None else q_len,
      full(sk) if kv_len is None else kv_len, *segs, diagonal_shift=shift)


def _any_visible(arrays: masks.MaskArrays):
  """Whether a per-row block holds a visible (query, key) pair by position:
  some batch row with a query and a key whose last query row (q_len - 1,
  top-left causal with ``diagonal_shift``) sees key 0."""
  return jnp.any((arrays.q_len > 0) & (arrays.kv_len > 0)
                 & (arrays.q_len - 1 + arrays.diagonal_shift >= 0))


def _shift(static: _Static, *xs):
  """Send each array to the next device of the ring (i -> i + 1)."""
  p = lax.axis_size(static.axis_name)
  perm = [(i, (i + 1) % p) for i in range(p)]
  return tuple(None if x is None else lax.ppermute(x, static.axis_name, perm)
               for x in xs)


def _run(static: _Static, mask: _Mask, step: int, q, k, kv_seg, apply,
         state):
  """``apply(block, arrays, state)`` for the blocks of ring step ``step``
  (local queries ``q``, the keys ``k`` held at that step, with their
  ``kv_seg``): a ``lax.cond`` between the plan's two where it depends on
  the device, and per-row blocks run only where they hold a visible pair
  (skipped blocks add nothing: their rows' lse stays -inf)."""
  src = _source(static, step)
  arrays = lambda blk: _arrays(static, mask, blk, src, q, k, kv_seg)
  if static.per_row:
    for blk in _per_row_blocks(static):
      a = arrays(blk)
      state = lax.cond(_any_visible(a), functools.partial(apply, blk, a),
                       lambda st: st, state)
    return state
  pred, block, other = _plan(static, step)
  run = lambda blk, st: st if blk is None else apply(blk, arrays(blk), st)
  if pred is None:
    return run(block, state)
  return lax.cond(pred, functools.partial(run, block),
                  functools.partial(run, other), state)


def _source(static: _Static, step: int):
  """The device whose K/V share this one holds at ring step ``step``."""
  p = lax.axis_size(static.axis_name)
  return lax.rem(lax.axis_index(static.axis_name) - step + p, p)


def _forward(static: _Static, q, k, v, mask: _Mask):
  """(out [B, T, N, H] q.dtype, lse [B, N, T] f32, +inf on rows that see
  no key: the kernels' backend contract)."""
  b, t, n, _ = q.shape
  to_rows = lambda x: jnp.transpose(x, (0, 2, 1))[..., None]  # [B, T, N, 1]

  def apply(kb, vb, blk: _Block, arrays, state):
    out, lse = state
    qa = _half(q, blk.q_part)
    kc, vc = _half(kb, blk.kv_part), _half(vb, blk.kv_part)
    params = _block_params(static, blk.causal)
    o_b, l_b = _dispatch.forward_fn(params)(qa, kc, vc, arrays, params)
    l_b = jnp.where(jnp.isinf(l_b), -jnp.inf, l_b)
    # -- merge (FA-2 Alg. 1's rescaling, across blocks)
    out_a, lse_a = _half(out, blk.q_part), _half(lse, blk.q_part, axis=2)
    new = jnp.logaddexp(lse_a, l_b)
    ref = jnp.where(jnp.isneginf(new), 0.0, new)
    out_a = (out_a * to_rows(jnp.exp(lse_a - ref))
             + o_b.astype(jnp.float32) * to_rows(jnp.exp(l_b - ref)))
    return (_put(out, blk.q_part, out_a),
            _put(lse, blk.q_part, new, axis=2))

  state = (jnp.zeros(q.shape, jnp.float32),
           jnp.full((b, n, t), -jnp.inf, jnp.float32))
  kb, vb, sb = k, v, mask.kv_seg
  p = lax.axis_size(static.axis_name)
  for step in range(p):
    state = _run(static, mask, step, q, kb, sb,
                 functools.partial(apply, kb, vb), state)
    if step + 1 < p:
      kb, vb, sb = _shift(static, kb, vb, sb)
  out, lse = state
  return out.astype(q.dtype), jnp.where(jnp.isneginf(lse), jnp.inf, lse)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _ring(static: _Static, q, k, v, mask: _Mask):
  return _forward(static, q, k, v, mask)[0]


def _ring_fwd(static, q, k, v, mask):
  out, lse = _forward(static, q, k, v, mask)
  return out, (q, k, v, mask, out, lse)


def _ring_bwd(static, residuals, d_out):
  q, k, v, mask, out, lse = residuals
  d_out = d_out.astype(q.dtype)

  def apply(kb, vb, blk: _Block, arrays, state):
    dq, dk, dv = state
    qa, out_a, do_a = (_half(x, blk.q_part) for x in (q, out, d_out))
    lse_a = _half(lse, blk.q_part, axis=2)
    kc, vc = _half(kb, blk.kv_part), _half(vb, blk.kv_part)
    params = _block_params(static, blk.causal)
    dq_b, dk_b, dv_b = _dispatch.backward_fn(params)(
        qa, kc, vc, arrays, out_a, lse_a, do_a, params)
    add = lambda acc, part, g: _put(
        acc, part, _half(acc, part) + g.astype(jnp.float32))
    return (add(dq, blk.q_part, dq_b), add(dk, blk.kv_part, dk_b),
            add(dv, blk.kv_part, dv_b))

  # dQ accumulates here; the dK / dV accumulators travel with their share.
  dq, dk, dv = (jnp.zeros(x.shape, jnp.float32) for x in (q, k, v))
  kb, vb, sb = k, v, mask.kv_seg
  p = lax.axis_size(static.axis_name)
  for step in range(p):
    dq, dk, dv = _run(static, mask, step, q, kb, sb,
                      functools.partial(apply, kb, vb), (dq, dk, dv))
    if step + 1 < p:
      kb, vb, sb, dk, dv = _shift(static, kb, vb, sb, dk, dv)
    else:  # one more hop brings every share's dK / dV home
      dk, dv = _shift(static, dk, dv)
  return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), None


_ring.defvjp(_ring_fwd, _ring_bwd)
