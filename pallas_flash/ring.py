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
gives device i chunks i and 2P - 1 - i: every device then does two causal
half-blocks at its own step and two full half-blocks at each other step.

Letters: B batch, T / S local query / key chunk length, N / K query / kv
heads, H head dim; layout [B, T, N, H] as everywhere.
"""
from __future__ import annotations

import dataclasses
import functools

import jax
from jax import lax
import jax.numpy as jnp

from pallas_flash import api, masks
from pallas_flash.params import KernelParams

_SKIP, _CAUSAL, _FULL = 0, 1, 2  # how a K/V chunk meets the local queries


def _kernels():
  from pallas_flash import _vjp  # imports the kernels lazily, as api does
  return _vjp


def ring_attention(query, key, value, *, axis_name, is_causal: bool = False,
                   layout: str = "contiguous", scale: float | None = None,
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
    is_causal: causal over the whole sequence (top-left; needs T == S).
    layout: how the sequence is split.  ``"contiguous"``: device i holds
      chunk i of P.  ``"zigzag"``: the sequence is cut into 2P chunks and
      device i holds chunks i and 2P - 1 - i (put a global array in that
      order with ``zigzag(x, P)`` before sharding it, and the output back
      with ``zigzag(out, P, inverse=True)``); with ``is_causal`` every
      device then does the same work (Brandon et al. 2023's balancing).
    scale: default ``1 / sqrt(H)``.
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
  q, k, v, _, spec, scale, cap, squeeze = api._validate(
      query, key, value, None, None, scale, is_causal, None, None, None,
      implementation, "top_left", None, None, logits_soft_cap)
  del spec
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
  params = _params(q, k, v, scale, cap, implementation, config)
  return _ring(_Static(params, axis_name, is_causal, layout == "zigzag"),
               q, k, v)


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


def _params(q, k, v, scale, cap, implementation, config) -> KernelParams:
  """The kernels' params of a non-causal block (the dispatcher's choice)."""
  candidates = ([implementation] if implementation else
                (["mosaic"] if api._is_hopper() and api._has_mosaic() else [])
                + ["triton"])
  for backend in candidates:
    params = KernelParams(spec=masks.MaskSpec(), scale=scale,
                          logits_soft_cap=cap, forward=backend,
                          config=config if backend == implementation else None,
                          interpret=not api._on_gpu())
    try:
      _kernels().check_supported(params, q, k, v, None)
      return params
    except NotImplementedError:
      if implementation is not None:
        raise
  raise NotImplementedError("no kernel backend takes this input")


@dataclasses.dataclass(frozen=True)
class _Static:
  params: KernelParams  # of a non-causal block
  axis_name: str
  is_causal: bool
  zigzag: bool


def _block_params(static: _Static, causal: bool) -> KernelParams:
  """A block with a causal diagonal (top-left) or without a mask."""
  return dataclasses.replace(static.params,
                             spec=masks.MaskSpec(is_causal=causal))


def _chunks(static: _Static, device):
  """Global chunk ids of the parts of a device's share (traced)."""
  if not static.zigzag:
    return (device,)
  return device, 2 * lax.axis_size(static.axis_name) - 1 - device


def _parts(static: _Static, x):
  return jnp.split(x, 2, axis=1) if static.zigzag else [x]


def _kind(static: _Static, q_chunk, kv_chunk):
  """_SKIP / _CAUSAL / _FULL for a (query chunk, key chunk) pair."""
  if not static.is_causal:
    return jnp.int32(_FULL)
  return jnp.where(kv_chunk < q_chunk, _FULL,
                   jnp.where(kv_chunk == q_chunk, _CAUSAL, _SKIP))


def _lengths(q, k) -> masks.MaskArrays:
  b = q.shape[0]
  return masks.MaskArrays(jnp.full((b,), q.shape[1], jnp.int32),
                          jnp.full((b,), k.shape[1], jnp.int32))


def _shift(static: _Static, *xs):
  """Send each array to the next device of the ring (i -> i + 1)."""
  p = lax.axis_size(static.axis_name)
  perm = [(i, (i + 1) % p) for i in range(p)]
  return tuple(lax.ppermute(x, static.axis_name, perm) for x in xs)


def _blocks(static: _Static, step: int):
  """The (query part, key part, kind) pairs of ring step ``step``: the keys
  this device holds then are those of device me - step."""
  p = lax.axis_size(static.axis_name)
  me = lax.axis_index(static.axis_name)
  src = lax.rem(me - step + p, p)
  return [(a, c, _kind(static, cq, ck))
          for a, cq in enumerate(_chunks(static, me))
          for c, ck in enumerate(_chunks(static, src))]


def _switch(kind, skip, block, *args):
  """lax.switch over _SKIP / _CAUSAL / _FULL."""
  return lax.switch(kind, [skip, functools.partial(block, True),
                           functools.partial(block, False)], *args)


def _forward(static: _Static, q, k, v):
  """(out [B, T, N, H] q.dtype, lse [B, N, T] f32, +inf on rows that see
  no key: the kernels' backend contract)."""
  q_parts = _parts(static, q)
  arrays = _lengths(q_parts[0], _parts(static, k)[0])
  outs = [jnp.zeros(x.shape, jnp.float32) for x in q_parts]
  lses = [jnp.full((x.shape[0], x.shape[2], x.shape[1]), -jnp.inf,
                   jnp.float32) for x in q_parts]

  def block(causal, qa, kc, vc):
    params = _block_params(static, causal)
    o, l = _kernels()._forward_impl(params)(qa, kc, vc, arrays, params)
    return o.astype(jnp.float32), jnp.where(jnp.isinf(l), -jnp.inf, l)

  def skip(qa, kc, vc):
    del kc, vc
    return (jnp.zeros(qa.shape, jnp.float32),
            jnp.full((qa.shape[0], qa.shape[2], qa.shape[1]), -jnp.inf,
                     jnp.float32))

  to_rows = lambda x: jnp.transpose(x, (0, 2, 1))[..., None]  # [B, T, N, 1]
  kb, vb = k, v
  for step in range(lax.axis_size(static.axis_name)):
    k_parts, v_parts = _parts(static, kb), _parts(static, vb)
    for a, c, kind in _blocks(static, step):
      o_b, l_b = _switch(kind, skip, block, q_parts[a], k_parts[c],
                         v_parts[c])
      # -- merge (FA-2 Alg. 1's rescaling, across blocks)
      new = jnp.logaddexp(lses[a], l_b)
      ref = jnp.where(jnp.isneginf(new), 0.0, new)
      outs[a] = (outs[a] * to_rows(jnp.exp(lses[a] - ref))
                 + o_b * to_rows(jnp.exp(l_b - ref)))
      lses[a] = new
    if step + 1 < lax.axis_size(static.axis_name):
      kb, vb = _shift(static, kb, vb)
  out = jnp.concatenate(outs, axis=1).astype(q.dtype)
  lse = jnp.concatenate(lses, axis=2)
  return out, jnp.where(jnp.isneginf(lse), jnp.inf, lse)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _ring(static: _Static, q, k, v):
  return _forward(static, q, k, v)[0]


def _ring_fwd(static, q, k, v):
  out, lse = _forward(static, q, k, v)
  return out, (q, k, v, out, lse)


def _ring_bwd(static, residuals, d_out):
  q, k, v, out, lse = residuals
  d_out = d_out.astype(q.dtype)
  q_parts, out_parts, do_parts = (_parts(static, x) for x in (q, out, d_out))
  lse_parts = jnp.split(lse, 2, axis=2) if static.zigzag else [lse]
  arrays = _lengths(q_parts[0], _parts(static, k)[0])

  def block(causal, a, kc, vc):
    params = _block_params(static, causal)
    grads = _kernels()._backward_impl(params, q_parts[a], kc, vc)(
        q_parts[a], kc, vc, arrays, out_parts[a], lse_parts[a], do_parts[a],
        params)
    return tuple(g.astype(jnp.float32) for g in grads)

  def skip(a, kc, vc):
    return (jnp.zeros(q_parts[a].shape, jnp.float32),
            jnp.zeros(kc.shape, jnp.float32), jnp.zeros(vc.shape, jnp.float32))

  dq = [jnp.zeros(x.shape, jnp.float32) for x in q_parts]
  dk = jnp.zeros(k.shape, jnp.float32)  # travel with their K/V share
  dv = jnp.zeros(v.shape, jnp.float32)
  kb, vb = k, v
  p = lax.axis_size(static.axis_name)
  for step in range(p):
    k_parts, v_parts = _parts(static, kb), _parts(static, vb)
    dk_parts, dv_parts = _parts(static, dk), _parts(static, dv)
    for a, c, kind in _blocks(static, step):
      dq_b, dk_b, dv_b = _switch(
          kind, lambda kc, vc, a=a: skip(a, kc, vc),
          lambda causal, kc, vc, a=a: block(causal, a, kc, vc),
          k_parts[c], v_parts[c])
      dq[a] = dq[a] + dq_b
      dk_parts[c] = dk_parts[c] + dk_b
      dv_parts[c] = dv_parts[c] + dv_b
    dk = jnp.concatenate(dk_parts, axis=1)
    dv = jnp.concatenate(dv_parts, axis=1)
    if step + 1 < p:
      kb, vb, dk, dv = _shift(static, kb, vb, dk, dv)
    else:  # one more hop brings every share's dK / dV home
      dk, dv = _shift(static, dk, dv)
  dq = jnp.concatenate(dq, axis=1)
  return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype)


_ring.defvjp(_ring_fwd, _ring_bwd)
