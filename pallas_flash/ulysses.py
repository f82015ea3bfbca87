"""All-to-all head scattering (DeepSpeed-Ulysses) over a mesh axis, for
``shard_map`` and for sharding.py's calls under ``jit``.

Jacobs et al. 2023, "DeepSpeed Ulysses": the sequence is split into P
contiguous chunks over the devices of ``axis_name``, as for ring attention.
One all-to-all per array trades the split: each device sends the rows of its
chunk of every head group to the device that owns that group and receives
the rows of its own head group from every device, so that it holds the
*whole* sequence of N / P heads (``lax.all_to_all``, split_axis = heads,
concat_axis = sequence).  Attention is then local: one kernel call on
[B, P T, N / P, H], with every mask as on one device (causal with either
alignment, windows, lengths of the whole sequence, segment ids, a dense
mask, soft-cap), and naturally balanced under causal masking (every device
runs the whole causal sequence of its heads).  A second all-to-all puts the
output back into sequence shares.  The backward does the same with d_out
in and dq, dk, dv out; the residuals (q, k, v, out, lse) stay in the head
layout, so fwd + bwd moves 8 arrays of a share each, 1 - 1/P of each
crossing the network, against the ring's 2 (P - 1) K/V shares forward and
K, V, dK, dV (f32) over P - 1 hops backward.

Heads: query head n reads kv head n // G (G = N / K).  The query heads must
split over the P devices (``N % P == 0``).  Where the kv heads do not
(``K % P != 0``, e.g. MQA), each kv head is repeated r = lcm(K, P) / K times
before the all-to-all (the kv head of each query head is unchanged), so
every device receives exactly the kv heads of its query heads; this moves no
more data than sending each device the one kv head it needs.  dK / dV of the
copies are summed after the all-to-all back.

Masks: lengths are of the whole sequence (the same on every device), as for
the ring; segment ids are shares like q and are all-gathered (int32
[B, T]: small); a dense mask holds this device's query rows against every
key (``[B|1, N|1, T|1, P S|1]``, ring_attention's convention): its rows go
to the head owners by the same all-to-all (a mask broadcast over heads: an
all-gather of its rows; over rows: replicated, this device's heads sliced).

Letters: B batch, T / S local query / key chunk length, N / K query / kv
heads, H head dim, P devices of the axis; layout [B, T, N, H] as everywhere.
"""
from __future__ import annotations

import dataclasses
import functools
import math

import jax
from jax import lax
import jax.numpy as jnp

from pallas_flash import _dispatch, masks, ring
from pallas_flash.params import KernelParams


def ulysses_attention(query, key, value, *, axis_name, is_causal: bool = False,
                      scale: float | None = None, query_seq_lengths=None,
                      key_value_seq_lengths=None, query_segment_ids=None,
                      key_value_segment_ids=None, local_window_size=None,
                      mask=None,
                      causal_alignment: masks.CausalAlignment = "top_left",
                      logits_soft_cap: float | None = None,
                      implementation: str | None = None, config=None):
  """Attention over a sequence split across the devices of ``axis_name``,
  by all-to-all head scattering (DeepSpeed-Ulysses).

  Call inside ``jax.shard_map`` (with ``check_vma=False``) where q, k, v
  are each device's contiguous share of the sequence along axis 1 (the
  same arguments as ``ring_attention`` with ``layout="contiguous"``).
  Each device gathers the whole sequence of N / P heads by one all-to-all
  per array, runs the kernels on it, and scatters the output back: about
  8 share-sized all-to-alls per fwd + bwd, against the ring's 2 (P - 1)
  K/V shares forward and 4 (P - 1) (K, V, f32 dK, dV) backward, but not
  overlapped with the kernels.  See docs/sharding.md for when it wins.

  Args:
    query: ``[B, T, N, H]``, this device's query rows; N must be a multiple
      of the axis size P.
    key, value: ``[B, S, K, H]``, this device's key / value rows
      (N % K == 0).  Where K % P != 0 (e.g. MQA) each kv head is repeated
      ``lcm(K, P) / K`` times before the all-to-all (the same data volume
      as sending each device just its kv heads).
    axis_name: the mesh axis the sequence is split over (P devices).
    is_causal, scale, local_window_size, causal_alignment,
      logits_soft_cap: as ``flash_attention``, on positions of the whole
      sequence (device i holds rows ``i T ... (i + 1) T - 1``).
    query_seq_lengths, key_value_seq_lengths: int32 ``[B]``, lengths of
      the *whole* sequence (the same on every device).
    query_segment_ids: int ``[B, T]``, this device's share of the packed
      sequence ids; ``key_value_segment_ids`` likewise ``[B, S]`` (defaults
      to ``query_segment_ids``).  All-gathered (small).
    mask: boolean ``[B | 1, N | 1, T | 1, P * S | 1]`` (True = attend):
      this device's query rows against the keys of the whole sequence, as
      for ``ring_attention`` (a global ``[B, N, P T, P S]`` mask sharded
      over its rows, ``P(None, None, axis_name)``).
    implementation: ``None`` (Mosaic GPU on Hopper, else Pallas-Triton;
      interpret mode on a CPU), ``"triton"`` or ``"mosaic"``.
    config: backend config, as for ``flash_attention``.

  Returns:
    ``[B, T, N, H]``: this device's rows of the output.

  Raises:
    ValueError: malformed input (as ``flash_attention``), or a mask that
      does not broadcast to ``[B, N, T, P * S]``.
    NotImplementedError: N not a multiple of the axis size (the heads
      cannot be split; ``ring_attention`` takes that input),
      ``implementation="xla"``, or a backend that cannot take the input.
  """
  q, k, v, arrays, spec, scale, cap = _dispatch.validate_shares(
      "ulysses_attention", query, key, value, scale, is_causal, query_seq_lengths,
      key_value_seq_lengths, local_window_size, implementation,
      causal_alignment, query_segment_ids, key_value_segment_ids,
      logits_soft_cap)
  if implementation == "xla":
    raise NotImplementedError("ulysses_attention runs the kernels "
                              "(implementation 'triton' or 'mosaic')")
  (b, t, n, h), (s, kh) = q.shape, k.shape[1:3]
  p = lax.axis_size(axis_name)
  if not takes(n, p):
    raise NotImplementedError(
        f"ulysses_attention splits the query heads over the {p} devices of "
        f"{axis_name!r}: num_heads={n} must be a multiple of {p} (the ring, "
        "ring_attention, takes any head count)")
  # Lengths of the whole sequence (validate's defaults are the shares').
  whole = lambda given, x, n: x if given is not None else jnp.full(
      (b,), n, jnp.int32)
  arrays = arrays._replace(
      q_len=whole(query_seq_lengths, arrays.q_len, p * t),
      kv_len=whole(key_value_seq_lengths, arrays.kv_len, p * s))
  if mask is not None:  # the query rows' stripe of the whole key sequence
    arrays = arrays._replace(mask=_dispatch.broadcastable(
        mask, "mask", True, (b, n, t, p * s)))
  # The kernels' call on the head layout, planned on its shapes.
  rep = _repeats(kh, p)
  head_q = jax.ShapeDtypeStruct((b, p * t, n // p, h), q.dtype)
  head_kv = jax.ShapeDtypeStruct((b, p * s, kh * rep // p, h), k.dtype)
  dense = None if arrays.mask is None else _mask_shape(arrays.mask.shape, p)
  params = _dispatch.plan(
      head_q, head_kv, head_kv, None,
      dataclasses.replace(spec, dense_mask_shape=dense), scale, cap, 0.0,
      implementation, config, ring=True)
  return _ulysses(_Static(params, axis_name, kh), q, k, v, arrays)


def takes(num_heads: int, devices: int) -> bool:
  """Whether ``num_heads`` query heads split over ``devices``."""
  return num_heads % devices == 0


def chosen(context_parallel: str, num_heads: int, devices: int) -> bool:
  """Whether a sequence-sharded call under ``jit`` (sharding.py) runs
  Ulysses, else the ring, for ``KernelParams.context_parallel`` and the
  local query heads over the ``devices`` of the sequence's axes.

  ``"ring"``: never; ``"ulysses"``: where the heads split (``takes``);
  ``"auto"`` (``context_parallel=None``): where the heads split and the
  program runs in one JAX process (``jax.process_count() == 1``).  Measured
  on H100s (2026-11-28, S = 128k causal d128 16 heads fwd+bwd under jit,
  efficiency t(1) / (P t(P))): Ulysses 0.944 / 0.948 at 2 / 4 GPUs against
  the automatic ring's 0.907 / 0.789, with a causal window of 4096 at 4
  GPUs 0.58 against 0.43.  Across hosts the ring: its hops overlap the
  kernels, Ulysses' all-to-alls do not and would leave NVLink (not
  measured)."""
  if context_parallel == "ring" or not takes(num_heads, devices):
    return False
  return context_parallel == "ulysses" or jax.process_count() == 1


def backend_calls(params: KernelParams, axis_name):
  """(forward, backward) of Ulysses over ``axis_name`` with the kernels'
  backend signatures (``params.py``), for sharding.py's per-shard calls of
  a T- and S-sharded input under ``jit`` with ``context_parallel``
  ``"ulysses"`` or ``"auto"``: forward(q, k, v, arrays) -> (out, lse);
  backward(q, k, v, arrays, out, lse, d_out) -> (dq, dk, dv), every array
  in sequence shares (``arrays``: whole lengths, local segment ids, the
  dense mask's local rows against all S columns, as ``ring.backend_calls``
  takes them).  Where ``chosen`` says the ring (local query heads that
  do not split over the axis; ``"auto"`` in several processes), the ring's
  calls run instead.

  Each call is partitioned on its own, so its inputs arrive in sequence
  shares: the forward moves q, k, v in and out, lse out (5 all-to-alls),
  the backward q, k, v, out, lse, d_out in and dq, dk, dv out (9), against
  ``ulysses_attention``'s 4 + 4, whose custom VJP keeps the head layout's
  residuals."""
  ring_fwd, ring_bwd = ring.backend_calls(params, axis_name)
  runs = lambda q: chosen(params.context_parallel, q.shape[2],
                          lax.axis_size(axis_name))

  def fwd(q, k, v, arrays):
    if not runs(q):
      return ring_fwd(q, k, v, arrays)
    static = _Static(params, axis_name, k.shape[2])
    out, lse, _ = _forward(static, q, k, v, arrays)
    return _to_seq(static, out), _to_seq(static, lse, heads=1, rows=2)

  def bwd(q, k, v, arrays, out, lse, d_out):
    if not runs(q):
      return ring_bwd(q, k, v, arrays, out, lse, d_out)
    static = _Static(params, axis_name, k.shape[2])
    residuals = (*_to_heads(static, q, k, v, arrays),
                 _to_heads_array(static, out),
                 _to_heads_array(static, lse, heads=1, rows=2))
    return _backward(static, residuals, d_out)

  return fwd, bwd


@dataclasses.dataclass(frozen=True)
class _Static:
  params: KernelParams  # of the head layout's call (whole sequence)
  axis_name: object  # a mesh axis name, or a tuple of them
  kv_heads: int  # K of the sequence shares (before any repeat)


def _repeats(kv_heads: int, devices: int) -> int:
  """Copies of each kv head so that the kv heads split over ``devices``
  with every query head's kv head beside it: lcm(K, P) / K."""
  return math.lcm(kv_heads, devices) // kv_heads


def _mask_shape(shape, p: int):
  """The head layout's dense mask shape of a [Bm, Nm, Tm, Sm] stripe."""
  bm, nm, tm, sm = shape
  return (bm, nm // p if nm != 1 else 1, tm * p if tm != 1 else 1, sm)


# --- the all-to-alls ------------------------------------------------------

def _to_heads_array(static: _Static, x, heads: int = 2, rows: int = 1):
  """Sequence shares -> the whole sequence of this device's heads: split
  ``heads`` into P parts, concatenate the P row shares along ``rows``."""
  return lax.all_to_all(x, static.axis_name, heads, rows, tiled=True)


def _to_seq(static: _Static, x, heads: int = 2, rows: int = 1):
  """The inverse of ``_to_heads_array``."""
  return lax.all_to_all(x, static.axis_name, rows, heads, tiled=True)


def _to_heads(static: _Static, q, k, v, arrays: masks.MaskArrays):
  """(q, k, v, arrays) of the head layout: q [B, P T, N / P, H], k / v
  [B, P S, K r / P, H] (kv heads repeated r = ``_repeats`` times), the
  masks of the whole sequence."""
  p = lax.axis_size(static.axis_name)
  rep = _repeats(k.shape[2], p)
  k, v = (x if rep == 1 else jnp.repeat(x, rep, axis=2) for x in (k, v))
  q, k, v = (_to_heads_array(static, x) for x in (q, k, v))
  gather = lambda x: None if x is None else lax.all_gather(
      x, static.axis_name, axis=1, tiled=True)
  mask = arrays.mask
  if mask is not None:
    if mask.shape[2] == 1:  # replicated over the rows: slice our heads
      if mask.shape[1] != 1:
        n = mask.shape[1] // p
        mask = lax.dynamic_slice_in_dim(
            mask, lax.axis_index(static.axis_name) * n, n, axis=1)
    elif mask.shape[1] == 1:  # broadcast over heads: every row, gathered
      mask = lax.all_gather(mask, static.axis_name, axis=2, tiled=True)
    else:  # rows to the heads' owners (as uint8: collectives of bits)
      mask = _to_heads_array(static, mask.astype(jnp.uint8), heads=1,
                             rows=2).astype(jnp.bool_)
  arrays = masks.MaskArrays(arrays.q_len, arrays.kv_len,
                            gather(arrays.q_segment_ids),
                            gather(arrays.kv_segment_ids), mask)
  return q, k, v, arrays


def _head_params(static: _Static, arrays: masks.MaskArrays) -> KernelParams:
  params = static.params
  if arrays.mask is None:
    return params
  return dataclasses.replace(params, spec=dataclasses.replace(
      params.spec, dense_mask_shape=tuple(arrays.mask.shape)))


# --- forward and backward ---------------------------------------------------

def _forward(static: _Static, q, k, v, arrays: masks.MaskArrays):
  """(out, lse) of the head layout (out [B, P T, N / P, H], lse
  [B, N / P, P T]) and the head layout's (q, k, v, arrays)."""
  qh, kh, vh, ah = _to_heads(static, q, k, v, arrays)
  params = _head_params(static, ah)
  out, lse = _dispatch.forward_fn(params)(qh, kh, vh, ah, params)
  return out, lse, (qh, kh, vh, ah)


def _backward(static: _Static, residuals, d_out):
  """(dq, dk, dv) in sequence shares from the head layout's residuals
  (q, k, v, arrays, out, lse) and d_out in sequence shares; dK / dV of
  repeated kv heads summed over their copies."""
  qh, kh, vh, ah, out, lse = residuals
  params = _head_params(static, ah)
  d_out = _to_heads_array(static, d_out.astype(qh.dtype))
  dq, dk, dv = _dispatch.backward_fn(params)(qh, kh, vh, ah, out, lse, d_out,
                                             params)[:3]
  dq, dk, dv = (_to_seq(static, x) for x in (dq, dk, dv))
  rep = dk.shape[2] // static.kv_heads
  if rep > 1:
    fold = lambda x: jnp.sum(
        x.reshape(*x.shape[:2], static.kv_heads, rep, x.shape[3]), axis=3,
        dtype=jnp.float32).astype(x.dtype)
    dk, dv = fold(dk), fold(dv)
  return dq, dk, dv


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _ulysses(static: _Static, q, k, v, arrays: masks.MaskArrays):
  return _to_seq(static, _forward(static, q, k, v, arrays)[0])


def _ulysses_fwd(static, q, k, v, arrays):
  out, lse, (qh, kh, vh, ah) = _forward(static, q, k, v, arrays)
  # Residuals in the head layout: the backward needs no all-to-all of them.
  return _to_seq(static, out), (qh, kh, vh, ah, out, lse)


def _ulysses_bwd(static, residuals, d_out):
  return (*_backward(static, residuals, d_out), None)


_ulysses.defvjp(_ulysses_fwd, _ulysses_bwd)
