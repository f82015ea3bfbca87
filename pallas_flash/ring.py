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
  q, k, v, _, _, spec, scale, cap, squeeze = api._validate(
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


@dataclasses.dataclass(frozen=True)
class _Block:
  """One kernel call: query rows x key rows of the local share (``None``:
  all rows, 0 / 1: the first / second half), causal diagonal or none."""
  q_part: int | None = None
  kv_part: int | None = None
  causal: bool = False


def _block_params(static: _Static, causal: bool) -> KernelParams:
  """A block with a causal diagonal (top-left) or without a mask."""
  return dataclasses.replace(static.params,
                             spec=masks.MaskSpec(is_causal=causal))


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


def _lengths(q, k) -> masks.MaskArrays:
  b = q.shape[0]
  return masks.MaskArrays(jnp.full((b,), q.shape[1], jnp.int32),
                          jnp.full((b,), k.shape[1], jnp.int32))


def _shift(static: _Static, *xs):
  """Send each array to the next device of the ring (i -> i + 1)."""
  p = lax.axis_size(static.axis_name)
  perm = [(i, (i + 1) % p) for i in range(p)]
  return tuple(lax.ppermute(x, static.axis_name, perm) for x in xs)


def _run(static: _Static, step: int, apply, state):
  """``apply(block, state)`` for the block of step ``step`` (lax.cond
  between the two where it depends on the device)."""
  pred, block, other = _plan(static, step)
  run = lambda blk, st: st if blk is None else apply(blk, st)
  if pred is None:
    return run(block, state)
  return lax.cond(pred, functools.partial(run, block),
                  functools.partial(run, other), state)


def _forward(static: _Static, q, k, v):
  """(out [B, T, N, H] q.dtype, lse [B, N, T] f32, +inf on rows that see
  no key: the kernels' backend contract)."""
  b, t, n, _ = q.shape
  to_rows = lambda x: jnp.transpose(x, (0, 2, 1))[..., None]  # [B, T, N, 1]

  def apply(kb, vb, blk: _Block, state):
    out, lse = state
    qa = _half(q, blk.q_part)
    kc, vc = _half(kb, blk.kv_part), _half(vb, blk.kv_part)
    params = _block_params(static, blk.causal)
    o_b, l_b = _kernels()._forward_impl(params)(qa, kc, vc, _lengths(qa, kc),
                                                params)
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
  kb, vb = k, v
  p = lax.axis_size(static.axis_name)
  for step in range(p):
    state = _run(static, step, functools.partial(apply, kb, vb), state)
    if step + 1 < p:
      kb, vb = _shift(static, kb, vb)
  out, lse = state
  return out.astype(q.dtype), jnp.where(jnp.isneginf(lse), jnp.inf, lse)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _ring(static: _Static, q, k, v):
  return _forward(static, q, k, v)[0]


def _ring_fwd(static, q, k, v):
  out, lse = _forward(static, q, k, v)
  return out, (q, k, v, out, lse)


def _ring_bwd(static, residuals, d_out):
  q, k, v, out, lse = residuals
  d_out = d_out.astype(q.dtype)

  def apply(kb, vb, blk: _Block, state):
    dq, dk, dv = state
    qa, out_a, do_a = (_half(x, blk.q_part) for x in (q, out, d_out))
    lse_a = _half(lse, blk.q_part, axis=2)
    kc, vc = _half(kb, blk.kv_part), _half(vb, blk.kv_part)
    params = _block_params(static, blk.causal)
    dq_b, dk_b, dv_b = _kernels()._backward_impl(params, qa, kc, vc)(
        qa, kc, vc, _lengths(qa, kc), out_a, lse_a, do_a, params)
    add = lambda acc, part, g: _put(
        acc, part, _half(acc, part) + g.astype(jnp.float32))
    return (add(dq, blk.q_part, dq_b), add(dk, blk.kv_part, dk_b),
            add(dv, blk.kv_part, dv_b))

  # dQ accumulates here; the dK / dV accumulators travel with their share.
  dq, dk, dv = (jnp.zeros(x.shape, jnp.float32) for x in (q, k, v))
  kb, vb = k, v
  p = lax.axis_size(static.axis_name)
  for step in range(p):
    dq, dk, dv = _run(static, step, functools.partial(apply, kb, vb),
                      (dq, dk, dv))
    if step + 1 < p:
      kb, vb, dk, dv = _shift(static, kb, vb, dk, dv)
    else:  # one more hop brings every share's dK / dV home
      dk, dv = _shift(static, dk, dv)
  return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype)


_ring.defvjp(_ring_fwd, _ring_bwd)
