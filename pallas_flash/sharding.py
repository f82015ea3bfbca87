"""Partitioning of the kernel calls under ``jax.jit`` (batch / head /
sequence sharding).

A ``pallas_call`` is opaque to XLA's partitioner, which would all-gather
sharded q/k/v and run the whole kernel on every device.  Here the backend
forward and backward calls are wrapped in ``custom_partitioning``: a Shardy
rule tells the propagation which dims are independent (batch, heads) and
which the kernel needs whole (T, S, H); the partition callback then runs the
backend function on each device's local shapes, with no collectives.

Heads: query head ``n`` reads kv head ``n // G`` (G = N // K), so q's N and
k/v's K may only be split together, into whole kv-head groups (each shard
holds K/shards kv heads and their G * K/shards query heads).  A head
sharding that splits a group (K % shards != 0) is dropped: heads are
replicated and the result stays correct.  An uneven split of B is dropped
likewise (the padded rows would carry garbage lengths into the kernel).

Sequence: where ring attention can take the call (``ring.takes``: T == S,
a kernel backend, no bias, ALiBi or dropout), q's T and k/v's S are one
factor that may be split (a dense mask's T with them, its S whole); the
callback then runs, over the rows' mesh axes (which custom_partitioning
binds while it traces the per-shard function), ``ring.backend_calls``: K/V
by collective-permute, causal shares reordered into the balanced zigzag
layout and back inside the call; or ``ulysses.backend_calls``: all-to-alls
of heads, where ``context_parallel`` and ``ulysses.chosen`` say so (by
default: the local query heads split over the axis, one JAX process).

Letters as in ``api.py``: B batch, T / S query / key length, N / K query /
kv heads, H head dim.
"""
from __future__ import annotations

import functools
import math
from typing import Callable

import jax
import jax.numpy as jnp
from jax.experimental.custom_partitioning import (
    ArrayMapping, SdyShardingRule, custom_partitioning)
from jax.sharding import NamedSharding, PartitionSpec as P

from pallas_flash import masks
from pallas_flash.params import KernelParams, score_terms
# By name: this module's locals and parameters called ``ring`` (the per-shard
# ring call, or whether there is one) would shadow the module.
from pallas_flash.ring import backend_calls, takes as ring_takes
from pallas_flash import ulysses

_WHOLE = ("t", "s", "h")  # factors the kernels need unsplit


def forward(fn: Callable, q, k, v, arrays: masks.MaskArrays,
            params: KernelParams, descales=None):
  """``fn(q, k, v, arrays, params) -> (out, lse)``, partitioned per shard.
  ``descales``: the fp8 forward's (q_descale * k_descale, v_descale), each
  [B, K] float32, split with the batch and kv heads and passed on as
  ``fn(..., descales=...)``; no ring or Ulysses takes them (a sequence
  split is gathered)."""
  if descales is not None:
    return _batch_folded(lambda *args: _partitioned(
        _bound(fn, params, False, fp8=True), args, backward_pass=False,
        fp8=True, interpret=_interpret(params)),
                         (q, k, v, arrays, tuple(descales)))
  ring = _ring(params, q, k, arrays, lambda calls: calls[0])
  return _batch_folded(lambda *args: _partitioned(
      _bound(fn, params, False), args, backward_pass=False, ring=ring,
      interpret=_interpret(params)), (q, k, v, arrays))


def backward(fn: Callable, q, k, v, arrays: masks.MaskArrays, out, lse, d_out,
             params: KernelParams):
  """``fn(q, k, v, arrays, out, lse, d_out, params) -> (dq, dk, dv)`` (and
  the dbias partial [B, N, 1|T, 1|S] with ``params.bias_grad``), partitioned
  per shard."""
  ring = _ring(params, q, k, arrays, lambda calls: calls[1])
  return _batch_folded(lambda *args: _partitioned(
      _bound(fn, params, True), args, backward_pass=True,
      dbias=params.bias_grad, ring=ring, interpret=_interpret(params)),
                       (q, k, v, arrays, out, lse, d_out))


# MaskArrays fields whose leading dim may be 1 (broadcast over the batch)
_BROADCAST_B = ("mask", "bias", "alibi_slopes")


def _batch_folded(call: Callable, args: tuple):
  """``call(*args)``, whose argument leaves all lead with the batch dim B
  (the ``_BROADCAST_B`` fields: B or 1) and whose results all lead with B,
  with ``jax.vmap`` folded into B: a mapped axis of size V runs one call on
  [V * B, ...] leaves (a mapped leaf of one row broadcast to B; an unmapped
  leaf of B rows repeated V times, one of one broadcast row kept) and its
  results are split back into [V, B, ...].  Without it the vmap ran the
  backend unpartitioned under the kernels' own batching (pallas_call's, a
  grid axis), which the d64 fused backward's ``pl.run_state`` does not
  have.  The kernels compute the same per row either way (dropout's bits
  come from the [B, N] seeds).  V is the major factor of the merged batch:
  a vmapped axis sharded over devices stays sharded (no collective); a B
  sharded inside a vmap with V whole is gathered, as it was before."""
  keep = []  # per leaf: whether one row broadcasts over the batch
  for a in args:
    fields = (zip(a._fields, a) if isinstance(a, masks.MaskArrays)
              else [("", a)])
    for name, x in fields:
      keep += [name in _BROADCAST_B] * len(jax.tree.leaves(x))

  @jax.custom_batching.custom_vmap
  def folded(*args):
    return call(*args)

  @folded.def_vmap
  def _rule(axis_size, in_batched, *args):
    leaves, tree = jax.tree.flatten(args)
    flags = jax.tree.leaves(in_batched)
    batch = leaves[0].shape[1 if flags[0] else 0]  # q's B (mapped axis first)

    def fold(x, mapped, keep):
      if not mapped:
        if keep and x.shape[0] == 1:
          return x
        x = jnp.broadcast_to(x, (axis_size, *x.shape))
      elif x.shape[1] != batch:  # (one broadcast row)
        x = jnp.broadcast_to(x, (axis_size, batch, *x.shape[2:]))
      return x.reshape(axis_size * batch, *x.shape[2:])
    outs = folded(*tree.unflatten(
        [fold(x, m, k) for x, m, k in zip(leaves, flags, keep, strict=True)]))
    outs = jax.tree.map(
        lambda y: y.reshape(axis_size, batch, *y.shape[1:]), outs)
    return outs, jax.tree.map(lambda _: True, outs)

  return folded(*args)


def _bound(fn: Callable, params, backward_pass: bool,
           fp8: bool = False) -> Callable:
  """The backend call with ``params`` bound, returning a tuple: one function
  object per (fn, params), so that ``jax.jit``'s tracing cache, keyed by
  the function and the argument types (``_partitioned``), hands later
  calls of the same kind the same jaxpr.  The forward of a jitted forward
  and of a jitted forward+backward, or the layers of one shape in a model,
  then trace the kernels, their tables and schedules once
  (``tools.first_call``).  Params that cannot key a cache get a fresh
  function (traced every call)."""
  try:
    return _cached_bound(fn, params, backward_pass, fp8)
  except TypeError:  # unhashable params
    return _cached_bound.__wrapped__(fn, params, backward_pass, fp8)


@functools.lru_cache(maxsize=256)
def _cached_bound(fn: Callable, params, backward_pass: bool,
                  fp8: bool) -> Callable:
  if fp8:
    return lambda q, k, v, arrays, descales: tuple(
        fn(q, k, v, arrays, params, descales=descales))
  if backward_pass:
    return lambda q, k, v, arrays, out, lse, d_out: tuple(
        fn(q, k, v, arrays, out, lse, d_out, params))
  return lambda q, k, v, arrays: tuple(fn(q, k, v, arrays, params))


def _interpret(params) -> bool:
  return isinstance(params, KernelParams) and params.interpret


def _ring(params, q, k, arrays, pick):
  """``axis_name -> per-shard call`` of ring attention (ring.py) with
  ``params.context_parallel == "ring"``, else (``"ulysses"``, ``"auto"``)
  of ``ulysses.backend_calls``, whose per-shard calls run Ulysses or the
  ring as ``ulysses.chosen`` decides on the local heads and the axis size,
  for a T- and S-sharded input; None where neither can take the call
  (bias, ALiBi or dropout) or T != S."""
  if (not isinstance(params, KernelParams)
      or score_terms(arrays, params.dropout_rate)
      or arrays.diagonal_shift is not None  # a block already: ring.py's own
      or not ring_takes(params, q, k)):
    return None
  calls = (backend_calls if params.context_parallel == "ring"
           else ulysses.backend_calls)
  return lambda axis_name: pick(calls(params, axis_name))


def _partitioned(call, args, *, backward_pass: bool, dbias: bool = False,
                 fp8: bool = False, ring=None, interpret: bool = False):
  """``call(*args)`` partitioned per shard (module docstring); ``fp8``: the
  fp8 forward, whose args end in its two [B, K] descales."""
  explicit = _explicit_axes(args)
  if explicit:
    # Explicit mesh axes (jax.make_mesh's default) put the sharding in the
    # types, which pallas_call cannot take: partition as Auto axes, then type
    # the results like the inputs.
    q, k, v = (jax.typeof(x).sharding for x in args[:3])
    qb, qt, qn, _ = tuple(q.spec) + (None,) * (4 - len(q.spec))
    lse = NamedSharding(q.mesh, P(qb, qn, qt))
    out_sharding = (q, k, v) if backward_pass else (q, lse)
    if dbias:
      out_sharding += (NamedSharding(q.mesh, P(qb, qn, None, None)),)
    inner = lambda args: _partitioned(call, args, backward_pass=backward_pass,
                                      dbias=dbias, fp8=fp8, ring=ring,
                                      interpret=interpret)
    return jax.sharding.auto_axes(inner, axes=explicit,
                                  out_sharding=out_sharding)(args)

  # custom_partitioning takes no closed-over constants (a backend may close
  # over numpy tables): trace once on the global shapes (by jit: once per
  # call of a kind, ``_bound``) and pass the constants in as replicated
  # operands.
  closed = jax.jit(call).trace(*args).jaxpr
  consts = tuple(closed.consts)

  def body(consts, args):
    return tuple(jax.core.eval_jaxpr(closed.jaxpr, list(consts),
                                     *jax.tree.leaves(args)))

  if closed.effects:
    # custom_partitioning cannot lower an effectful body.  Only the Mosaic
    # GPU interpreter (CPU only), which orders its io_callbacks by effect
    # tokens, may run unpartitioned.  A native backend call with an effect
    # (e.g. a top-level jax.new_ref: keep Refs inside pl.run_state) would
    # silently be all-gathered and run whole on every device, so it is an
    # error here rather than a slow fallback.
    if not interpret:
      raise RuntimeError(
          f"pallas_flash: a {'backward' if backward_pass else 'forward'} "
          f"backend call has effects {closed.effects} and cannot be "
          "partitioned per shard; backends must be pure functions")
    return body(consts, args)

  def partition(mesh, arg_shapes, result_shape):
    del result_shape
    const_shapes, shapes = arg_shapes
    arg_shardings, out_shardings, seq = _shardings(mesh, shapes, backward_pass,
                                                   dbias, ring is not None, fp8)
    replicated = tuple(NamedSharding(mesh, P()) for _ in const_shapes)
    # Local shapes: the kernels take any B, N; a T / S split runs the ring
    # over its mesh axes (traced with the mesh's axis names bound).
    local = call if seq is None else ring(seq)

    def per_shard(consts, args):
      del consts  # the retrace makes its own
      return local(*args)

    return mesh, per_shard, out_shardings, (replicated, arg_shardings)

  def infer(mesh, arg_shapes, result_shape):  # GSPMD (Shardy off) only
    del result_shape
    return _shardings(mesh, arg_shapes[1], backward_pass, dbias,
                      ring is not None, fp8)[1]

  def rule(mesh, value_types, result_types):
    del mesh
    return _rule(args[3], value_types, result_types, len(consts),
                 backward_pass, ring is not None, descales=fp8)

  partitioned = custom_partitioning(body)
  partitioned.def_partition(partition=partition,
                            infer_sharding_from_operands=infer,
                            sharding_rule=rule)
  # (custom_partitioning has no batching rule: a vmap never reaches it, it is
  # folded into the batch first, ``_batch_folded``)
  return partitioned(consts, args)


def _explicit_axes(args) -> tuple[str, ...]:
  """Explicit mesh axes that the inputs' types are sharded over."""
  axes = []
  for x in jax.tree.leaves(args):
    sharding = jax.typeof(x).sharding
    explicit = getattr(sharding.mesh, "explicit_axes", ())
    for entry in getattr(sharding, "spec", ()):
      axes += [a for a in _axes(entry) if a in explicit and a not in axes]
  return tuple(axes)


# --- Shardy rule ------------------------------------------------------------

def _plane_map(shape, prefix: str):
  """Factors of a [B, N, T, S]-broadcastable array (or of its leading dims):
  a size-1 (broadcast) dim gets a factor of its own, never sharded (a shared
  factor would take the smallest size of its dims)."""
  return ArrayMapping(*(f if size != 1 else f"{prefix}{f}"
                        for f, size in zip(("b", "n", "t", "s"), shape)))


def _rule(arrays: masks.MaskArrays, value_types, result_types, num_consts,
          backward_pass, ring: bool, descales: bool = False):
  # q's N ("n") and k/v's K ("k") are separate factors.  A compound N = (K, G)
  # would let Shardy split q's heads inside a group, through sub-axes that
  # the partition callback cannot even read as a mesh sharding (e.g. N=4,
  # K=2 over 4 devices); the callback ties the two instead (_plan).
  # Where the ring can run (T == S), T and S are one factor that may be
  # split: q's rows and k/v's rows over the same mesh axes.
  s = "t" if ring else "s"
  q_map = ArrayMapping("b", "t", "n", "h")
  kv_map = ArrayMapping("b", s, "k", "h")
  lse_map = ArrayMapping("b", "n", "t")
  mask_maps = [ArrayMapping("b"), ArrayMapping("b")]  # q_len, kv_len
  if arrays.q_segment_ids is not None:
    mask_maps += [ArrayMapping("b", "t"), ArrayMapping("b", s)]
  if arrays.mask is not None:
    mask_maps.append(_plane_map(arrays.mask.shape, "m"))
  if arrays.bias is not None:
    mask_maps.append(_plane_map(arrays.bias.shape, "bias_"))
  if arrays.alibi_slopes is not None:
    mask_maps.append(_plane_map(arrays.alibi_slopes.shape, "alibi_"))
  if arrays.dropout_seeds is not None:
    mask_maps.append(ArrayMapping("b", "n"))
  if arrays.diagonal_shift is not None:
    mask_maps.append(ArrayMapping("b"))
  const_maps = [ArrayMapping(*(f"const{i}_{d}" for d in range(len(t.shape))))
                for i, t in enumerate(value_types[:num_consts])]
  operands = [*const_maps, q_map, kv_map, kv_map, *mask_maps]
  if descales:  # the fp8 forward's two [B, K] descales
    operands += [ArrayMapping("b", "k")] * 2
  if backward_pass:
    operands += [q_map, lse_map, q_map]  # out, lse, d_out
    results = (q_map, kv_map, kv_map)
    if len(result_types) == 4:  # the dbias partial [B, N, 1|T, 1|S]
      results += (_plane_map(result_types[3].shape, "dbias_"),)
  else:
    results = (q_map, lse_map)
  # Shardy numbers factors by first appearance and wants the special factors
  # listed in that order.
  order = list(dict.fromkeys(f for m in (*operands, *results) for f in m))
  whole = [f for f in order if (f in _WHOLE and not (ring and f == "t"))
           or f.startswith("const")]
  return SdyShardingRule(tuple(operands), results,
                         need_replication_factors=tuple(whole))


# --- partitioning -------------------------------------------------------------

def _axes(entry) -> tuple[str, ...]:
  if entry is None:
    return ()
  return tuple(entry) if isinstance(entry, (tuple, list)) else (entry,)


def _dim_spec(sharding, dim: int):
  """Mesh axes of one dim of a sharding (None: unsharded or not a mesh one)."""
  if not isinstance(sharding, NamedSharding):
    return None
  spec = sharding.spec
  return spec[dim] if dim < len(spec) else None


def _kept(mesh, entry, *sizes):
  """``entry`` if every size splits evenly over its mesh axes, else None."""
  axes = _axes(entry)
  if not axes:
    return None
  shards = math.prod(mesh.shape[a] for a in axes)
  return entry if all(size % shards == 0 for size in sizes) else None


def _plan(mesh, q, k, ring: bool):
  """(batch, heads, sequence) mesh axes taken from q's sharding, or None
  each; sequence only where the ring can run and k's rows are split over
  the same axes as q's."""
  b, t, n, _ = q.shape
  kh = k.shape[2]
  batch = _kept(mesh, _dim_spec(q.sharding, 0), b)
  # Whole kv-head groups per shard: K % shards == 0 (then N % shards == 0 too).
  heads = _kept(mesh, _dim_spec(q.sharding, 2), n, kh)
  if set(_axes(batch)) & set(_axes(heads)):  # not a valid sharding; be safe
    heads = None
  seq = _kept(mesh, _dim_spec(q.sharding, 1), t) if ring else None
  if (seq is not None and _axes(seq) != _axes(_dim_spec(k.sharding, 1))
      or set(_axes(seq)) & set(_axes(batch) + _axes(heads))):
    seq = None
  return batch, heads, seq


def _shardings(mesh, shapes, backward_pass, dbias: bool, ring: bool,
               fp8: bool = False):
  """(arg shardings, result shardings, sequence axes or None) that keep only
  batch / head axes, and the sequence axes where the ring runs; ``fp8``:
  the fp8 forward's descales [B, K] follow the batch and kv heads."""
  q, k, _, arrays = shapes[:4]
  batch, heads, seq = _plan(mesh, q, k, ring)
  ns = lambda *spec: NamedSharding(mesh, P(*spec))
  qs = ns(batch, seq, heads, None)  # also k, v, out, d_out, dq, dk, dv
  lse = ns(batch, heads, seq)

  def plane(x, *rest):  # batch / heads of a [B|1, N|1, ...] array
    if x is None:
      return None
    bx, nx = x.shape[:2]
    return ns(batch if bx != 1 else None, heads if nx != 1 else None, *rest)

  segments = None if arrays.q_segment_ids is None else ns(batch, seq)
  # The dense mask's rows go with q's (the ring slices its columns, all
  # local, per step); a size-1 T stays replicated.
  mask_rows = None if arrays.mask is None or arrays.mask.shape[2] == 1 else seq
  arr = masks.MaskArrays(ns(batch), ns(batch), segments, segments,
                         plane(arrays.mask, mask_rows, None),
                         plane(arrays.bias, None, None),
                         plane(arrays.alibi_slopes), plane(arrays.dropout_seeds),
                         None if arrays.diagonal_shift is None else ns(batch))
  if backward_pass:
    results = (qs, qs, qs) + ((ns(batch, heads, None, None),) if dbias else ())
    return (qs, qs, qs, arr, qs, lse, qs), results, seq
  if fp8:
    return (qs, qs, qs, arr, (ns(batch, heads),) * 2), (qs, lse), seq
  return (qs, qs, qs, arr), (qs, lse), seq
