"""Batch / head sharding under jit (pallas_flash/sharding.py).

On 4 devices (CPU: tests/conftest.py forces 4 host devices), every sharded
call must equal the unsharded call of the same implementation, keep the
input's sharding, and, for batch / head sharding, compile to no collective
in the forward and in the forward + backward; sequence sharding (T = S
split over one axis, with batch or heads over another axis of a 2 x 2 mesh)
with ``context_parallel="ring"`` to collective-permutes only (a ring,
pallas_flash/ring.py), with ``"ulysses"`` to all-to-alls
(pallas_flash/ulysses.py), and by default to all-to-alls where the query
heads split over the sequence's devices, else collective-permutes.
Batch x heads x sequence on a 2 x 2 x 2 mesh reruns itself on 8 CPU
devices in a subprocess.
"""
from __future__ import annotations

import dataclasses
import functools
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import pallas_flash as pf
import cases
from cases import SHARDED, sharded_fns

pytestmark = pytest.mark.skipif(len(jax.devices()) < 4,
                                reason="needs 4 devices (4 host devices on CPU)")

_COLLECTIVES = re.compile(
    r"all-gather|all-reduce|collective-permute|all-to-all|reduce-scatter")
B, T, H = 4, 33, 32


@dataclasses.dataclass(frozen=True)
class Layout:
  name: str
  mesh: tuple[int, ...]
  q: P  # q (and out / dq) sharding
  kv: P | None = None  # k / v sharding; None: as q
  n: int = 4
  k: int = 4
  t: int = T
  mask: str | None = None  # "full" [B,N,T,S], "keys" [B,1,1,S], "heads" [1,N,T,S]
  explicit: bool = False  # Explicit mesh axes (sharding in the types)

  def __str__(self):
    return self.name


# Batch, heads, both (2 x 2 mesh, GQA with whole kv-head groups per shard);
# the last on Explicit mesh axes, jax.make_mesh's default.
PARTITIONED = [
    Layout("batch", (4,), P("x"), mask="full"),
    Layout("heads", (4,), P(None, None, "x"), mask="heads"),
    Layout("batch_heads_gqa", (2, 2), P("x", None, "y"), k=2, mask="keys"),
    Layout("batch_heads_gqa_explicit", (2, 2), P("x", None, "y"), k=2,
           mask="keys", explicit=True),
]


def _mesh(shape, explicit=False):
  names = ("x", "y")[:len(shape)]
  kind = AxisType.Explicit if explicit else AxisType.Auto
  return jax.make_mesh(shape, names, axis_types=(kind,) * len(shape),
                       devices=jax.devices()[:4])


def _inputs(lay: Layout):
  # numpy draws: jax.random's eager ops would each compile (seconds here).
  rng = np.random.default_rng(0)
  normal = lambda *shape: jnp.asarray(rng.standard_normal(shape, np.float32))
  q, k, v = (normal(B, lay.t, heads, H) for heads in (lay.n, lay.k, lay.k))
  seg = np.repeat(np.arange(3), -(-lay.t // 3))[:lay.t]
  extra = {
      "query_seq_lengths": jnp.array([lay.t, 20, 7, 30], jnp.int32),
      "key_value_seq_lengths": jnp.array([lay.t, 25, 31, 9], jnp.int32),
      "query_segment_ids": jnp.asarray(np.stack([seg, seg[::-1]] * 2), jnp.int32),
  }
  if lay.mask is not None:
    shape = {"full": (B, lay.n, lay.t, lay.t), "keys": (B, 1, 1, lay.t),
             "heads": (1, lay.n, lay.t, lay.t)}[lay.mask]
    extra["mask"] = jnp.asarray(rng.random(shape) < 0.8)
  return (q, k, v), extra, normal(*q.shape)


def _extra_spec(lay: Layout, name: str, x):
  """Batch / head axes of q's sharding, on the dims where x has them."""
  q_spec = tuple(lay.q) + (None,) * (4 - len(lay.q))
  batch, heads = q_spec[0], q_spec[2]
  if name == "mask":
    return P(batch if x.shape[0] > 1 else None, heads if x.shape[1] > 1 else None)
  return P(batch)


def _shard(lay: Layout, qkv, extra):
  mesh = _mesh(lay.mesh, lay.explicit)
  put = lambda x, spec: jax.device_put(x, NamedSharding(mesh, spec))
  q, k, v = qkv
  kv = lay.q if lay.kv is None else lay.kv
  qkv = (put(q, lay.q), put(k, kv), put(v, kv))
  extra = {n: put(x, _extra_spec(lay, n, x)) for n, x in extra.items()}
  return qkv, extra


def _fns(impl, alignment="top_left", context_parallel=None):
  def fwd(qkv, extra):
    return pf.flash_attention(*qkv, is_causal=True, implementation=impl,
                              causal_alignment=alignment,
                              context_parallel=context_parallel, **extra)

  def fwd_bwd(qkv, extra, ct):
    # out and the gradient of sum(out * ct) with respect to q, k, v.
    out, vjp = jax.vjp(lambda qkv: fwd(qkv, extra), qkv)
    return out, vjp(ct)[0]

  return fwd, fwd_bwd


@functools.cache
def _jitted(impl, alignment="top_left", context_parallel=None):
  """One jit per implementation: equal unsharded calls compile once."""
  return tuple(jax.jit(f) for f in _fns(impl, alignment, context_parallel))


def _collectives(jitted, *args):
  compiled = jitted.lower(*args).compile()
  return sorted(set(_COLLECTIVES.findall(compiled.as_text()))), compiled


def _check_close(got, want):
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=0, atol=1e-6)


def _check_sharding(got, want):
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    assert g.sharding.is_equivalent_to(w.sharding, g.ndim), (
        g.sharding, w.sharding)


def _sequence_shards(lay: Layout, qkv, extra, ct, mesh=None):
  """(q, k, v), the extras and the cotangent sharded like ``lay.q``; a
  dense mask over its rows (all its columns on every device), or
  replicated where it has one row."""
  mesh = mesh or _mesh(lay.mesh)
  put = lambda x, spec: jax.device_put(x, NamedSharding(mesh, spec))
  spec = lambda n, x: (P(*lay.q[:x.ndim]) if n != "mask"
                       else P(None, None, lay.q[1]) if x.shape[2] > 1
                       else P())
  return (tuple(put(x, lay.q) for x in qkv),
          {n: put(x, spec(n, x)) for n, x in extra.items()}, put(ct, lay.q))


def _check_equal(got, want, atol=2e-5, err_msg=""):
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=0,
                               atol=atol, err_msg=err_msg)


def _run(impl, lay: Layout, *, no_collectives: bool):
  qkv, extra, ct = _inputs(lay)
  fwd, fwd_bwd = _jitted(impl)
  want = fwd_bwd(qkv, extra, ct)
  s_qkv, s_extra = _shard(lay, qkv, extra)
  s_ct = jax.device_put(ct, s_qkv[0].sharding)
  found_bwd, compiled = _collectives(fwd_bwd, s_qkv, s_extra, s_ct)
  got = compiled(s_qkv, s_extra, s_ct)
  _check_close(got, want)
  _check_sharding(got[0], s_qkv[0])
  if no_collectives:
    found, compiled = _collectives(fwd, s_qkv, s_extra)
    out = compiled(s_qkv, s_extra)
    assert found == [], f"forward of {lay} compiles to {found}"
    assert found_bwd == [], f"forward + backward of {lay} compiles to {found_bwd}"
    _check_close(out, want[0])
    _check_sharding(out, s_qkv[0])
    _check_sharding(got[1], s_qkv)  # dq, dk, dv as q, k, v


@pytest.mark.parametrize("lay", PARTITIONED, ids=str)
@pytest.mark.parametrize("impl", ["triton", "xla"])
def test_batch_and_head_sharding_runs_per_shard(impl, lay):
  _run(impl, lay, no_collectives=True)


@pytest.mark.parametrize("mesh_shape, spec, vb", [
    ((4,), P("x"), (4, 1)),  # a vmapped axis over the devices
    ((2, 2), P("x", "y"), (2, 2)),  # it over x, the batch inside over y
], ids=["v", "v_b"])
def test_vmap_over_a_sharded_axis_runs_per_shard(mesh_shape, spec, vb):
  """jax.vmap is folded into the batch with the mapped axis major
  (``sharding._batch_folded``), so a mapped axis sharded over devices (and
  a batch sharded inside it) keeps its sharding: no collective in the
  fwd+bwd, the one-device result."""
  _, fwd_bwd = _fns("triton")
  rng = np.random.default_rng(1)
  shape = (*vb, 32, 2, H)
  xs = [jnp.asarray(rng.standard_normal(shape, np.float32)) for _ in range(4)]
  step = jax.jit(jax.vmap(lambda q, k, v, ct: fwd_bwd((q, k, v), {}, ct)))
  want = step(*xs)
  sharded = [jax.device_put(x, NamedSharding(_mesh(mesh_shape), spec))
             for x in xs]
  found, compiled = _collectives(step, *sharded)
  got = compiled(*sharded)
  assert found == [], found
  _check_close(got, want)
  _check_sharding(got[0], sharded[0])


def test_group_splitting_and_sequence_sharding_fall_back_to_gathers():
  # N=4 query heads over 4 devices with K=2 kv heads (G=2) would put half a
  # group on each shard, and S alone split (k / v over S, q whole) is no
  # ring: those dims are replicated (XLA gathers them), never wrong results.
  lay = Layout("gqa_split_seq", (2, 2), P(None, None, ("x", "y")),
               kv=P(None, "x"), k=2, t=34)
  _run("triton", lay, no_collectives=False)


# The ring over one axis of 4 devices, and over one axis of a 2 x 2 mesh
# whose other axis splits heads (GQA, whole kv-head groups per shard) or
# batch (the lengths split with it): in one jit, no gather.
RINGS = [
    Layout("sequence", (4,), P(None, "x"), k=2, t=32),
    Layout("heads_sequence", (2, 2), P(None, "y", "x"), k=2, t=32),
    Layout("batch_sequence", (2, 2), P("x", "y"), k=2, t=32),
]


@pytest.mark.parametrize("lay", RINGS, ids=str)
@pytest.mark.parametrize("alignment", ["top_left", "bottom_right"])
def test_sequence_sharding_runs_a_ring(alignment, lay):
  # q / k / v split over T = S (and the segment ids with them; lengths
  # split as the batch): flash_attention(context_parallel="ring") runs ring
  # attention over that mesh axis (contiguous chunks), moving data by
  # collective-permutes only.  Causal, GQA, lengths and segment ids
  # (bottom-right: diagonals at kv_len - q_len = 0, 5, 24, -21 per batch
  # row); the ring merges blocks, so it equals the one-device kernel up to
  # f32 rounding.
  _check_sequence_sharding(lay, _jitted("triton", alignment, "ring"),
                           ["collective-permute"])


def _check_sequence_sharding(lay: Layout, jitted, collectives):
  """``jitted`` (fwd, fwd_bwd) on ``lay``'s sequence shards: forward and
  forward + backward compile to ``collectives`` alone, values and
  gradients equal the unsharded call's, outputs sharded like the inputs."""
  qkv, extra, ct = _inputs(lay)
  fwd, fwd_bwd = jitted
  want = fwd_bwd(qkv, extra, ct)
  s_qkv, s_extra, s_ct = _sequence_shards(lay, qkv, extra, ct)
  for f, args in ((fwd, (s_qkv, s_extra)), (fwd_bwd, (s_qkv, s_extra, s_ct))):
    found, compiled = _collectives(f, *args)
    assert found == collectives, found
  got = compiled(s_qkv, s_extra, s_ct)
  _check_equal(got, want)
  _check_sharding(got, (s_qkv[0], s_qkv))


def test_shard_map_runs_the_kernel_on_local_shapes():
  # The kernels' out_shape carries no varying-axes type: check_vma=False.
  lay = PARTITIONED[0]  # batch-sharded
  qkv, extra, ct = _inputs(lay)
  _, fwd_bwd = _fns("triton")
  spec = {n: P("x") for n in extra}
  mapped = jax.shard_map(fwd_bwd, mesh=_mesh((4,)), check_vma=False,
                         in_specs=(P("x"), spec, P("x")), out_specs=P("x"))
  _check_close(jax.jit(mapped)(qkv, extra, ct),
               _jitted("triton")[1](qkv, extra, ct))


def test_backend_constants_become_replicated_operands():
  # custom_partitioning refuses closed-over constants; a backend's numpy
  # tables must still partition per shard.
  from pallas_flash import masks, sharding
  table = np.arange(H, dtype=np.float32)

  def backend(q, k, v, arrays, params):
    del params
    out = (q + table) * arrays.q_len[:, None, None, None] + k + v
    return out, jnp.transpose(out[..., 0], (0, 2, 1))

  qkv, _, _ = _inputs(PARTITIONED[0])
  arrays = masks.MaskArrays(jnp.arange(B, dtype=jnp.int32),
                            jnp.ones(B, jnp.int32))
  f = jax.jit(lambda qkv, arrays: sharding.forward(backend, *qkv, arrays, None))
  mesh = _mesh((4,))
  s_qkv, s_arrays = jax.device_put((qkv, arrays), NamedSharding(mesh, P("x")))
  found, compiled = _collectives(f, s_qkv, s_arrays)
  assert found == []
  _check_close(compiled(s_qkv, s_arrays), f(qkv, arrays))


# --- the default Hopper dispatch, lowered for CUDA on the CPU ----------------
# The Mosaic GPU kernels cannot run partitioned on fake CPU devices (the
# interpreter's io_callbacks are effects, which custom_partitioning cannot
# lower), so these cases lower jit(fwd + bwd) for CUDA with the dispatcher
# told it is on a Hopper, and check that both the forward and the backward
# reach XLA as custom_partitioning calls with no kernel outside them: then
# the partitioner runs each kernel on its shard.  Natively, .ci/gpu-multi
# compiles the same calls on 2 and 4 GPUs and asserts no collective.
@pytest.fixture
def on_hopper():
  from tools import mosaic_modules
  with mosaic_modules.as_on_hopper():  # (lowered, never compiled)
    yield


@pytest.mark.parametrize("case", SHARDED, ids=str)
def test_default_hopper_path_is_partitioned(on_hopper, case):
  mesh = _mesh(case.mesh_shape(4))
  q, k, v, arrays, static = case.inputs(mesh, concrete=False)
  _, fwd_bwd = sharded_fns(static)
  d_out = jax.ShapeDtypeStruct(q.shape, q.dtype, sharding=q.sharding)
  text = jax.jit(fwd_bwd).trace(q, k, v, arrays, d_out).lower(
      lowering_platforms=("cuda",)).as_text(debug_info=False)
  calls = re.findall(r"custom_call @(\w+)", text)
  assert calls.count("CustomSPMDPartitioning") == 2, calls  # fwd, bwd
  kernels = [c for c in calls if c not in ("CustomSPMDPartitioning",
                                           "Sharding", "SPMDFullToShardShape",
                                           "SPMDShardToFullShape")]
  assert kernels == [], f"kernels outside the partitioned calls: {kernels}"


@pytest.mark.parametrize("h", [64, 128])
def test_default_hopper_path_under_vmap_is_partitioned(on_hopper, h):
  """A vmapped fwd+bwd on the default Hopper path (d64: the fused backward,
  whose ``pl.run_state`` has no batching rule) lowers to the two
  partitioned calls and no kernel outside them, its axis sharded over the
  devices (before the fold, ``sharding._batch_folded``: the kernels ran
  unpartitioned, and d64 did not lower)."""
  sharding = NamedSharding(_mesh((4,)), P("x"))
  x = jax.ShapeDtypeStruct((4, 1, 256, 2, h), jnp.bfloat16, sharding=sharding)

  def fwd_bwd(q, k, v, ct):
    out, pull = jax.vjp(lambda q, k, v: pf.flash_attention(
        q, k, v, is_causal=True), q, k, v)
    return out, pull(ct)
  text = jax.jit(jax.vmap(fwd_bwd)).trace(x, x, x, x).lower(
      lowering_platforms=("cuda",)).as_text(debug_info=False)
  calls = re.findall(r"custom_call @(\w+)", text)
  assert calls.count("CustomSPMDPartitioning") == 2, calls  # fwd, bwd
  assert "mosaic_gpu" not in text  # (lowered per shard, in the compile)


FP8_SPECS = [P("x"), P(None, None, "x"), P("x", None, "y")]


@pytest.mark.parametrize("spec", FP8_SPECS, ids=str)
def test_fp8_hopper_forward_is_partitioned(on_hopper, spec):
  """The fp8 forward (Mosaic kernel) under batch, head and batch x head
  sharding, per-(batch, kv head) descales split with them: one
  partitioned call and no kernel outside it (tests/test_multi_gpu.py runs
  it on GPUs and checks values and collectives)."""
  mesh = _mesh((2, 2) if "y" in spec else (4,))
  b, t, n, kh, h = 4, 256, 8, 4, 128
  e4m3 = jnp.float8_e4m3fn
  full = tuple(spec) + (None,) * (4 - len(spec))
  shaped = lambda shape, dtype, *dims: jax.ShapeDtypeStruct(
      shape, dtype, sharding=NamedSharding(mesh, P(*dims)))
  q = shaped((b, t, n, h), e4m3, *full)
  k, v = (shaped((b, t, kh, h), e4m3, *full) for _ in range(2))
  qd, kd, vd = (shaped((b, kh), jnp.float32, full[0], full[2])
                for _ in range(3))
  fwd = lambda q, k, v, qd, kd, vd: pf.flash_attention(
      q, k, v, is_causal=True, q_descale=qd, k_descale=kd, v_descale=vd)
  text = jax.jit(fwd).trace(q, k, v, qd, kd, vd).lower(
      lowering_platforms=("cuda",)).as_text(debug_info=False)
  calls = re.findall(r"custom_call @(\w+)", text)
  assert calls.count("CustomSPMDPartitioning") == 1, calls
  kernels = [c for c in calls if c not in ("CustomSPMDPartitioning",
                                           "Sharding", "SPMDFullToShardShape",
                                           "SPMDShardToFullShape")]
  assert kernels == [], f"kernels outside the partitioned call: {kernels}"


def test_effectful_native_backend_is_refused():
  # A native backend call with an effect cannot be partitioned; it must fail
  # loudly, never fall back to gathering the inputs onto every device.
  from pallas_flash import masks, sharding
  from pallas_flash.params import KernelParams

  def backend(q, k, v, arrays, params):
    del arrays, params
    acc = jax.new_ref(jnp.zeros(q.shape, jnp.float32))  # an effect
    acc[...] += q + k + v
    return acc[...], jnp.zeros(q.shape[:1] + q.shape[2:3] + q.shape[1:2])

  qkv, _, _ = _inputs(PARTITIONED[0])
  arrays = masks.MaskArrays(jnp.full(B, T, jnp.int32), jnp.full(B, T, jnp.int32))
  params = KernelParams(spec=masks.MaskSpec(), scale=1.0, forward="triton",
                        interpret=False)
  with pytest.raises(RuntimeError, match="cannot be partitioned"):
    sharding.forward(backend, *qkv, arrays, params)


# The automatic ring (context_parallel="ring") with windows and dense
# masks: plain jit, q / k / v
# sequence-sharded (shares of 16 rows), a [B, N, T, S] mask over its rows
# (each device holds its rows' stripe of all keys), a [B, 1, 1, S] one
# replicated; lengths and segment ids as in the rings above.  A causal
# window narrower than a share runs contiguous in two steps; a wider one,
# and causal with a mask, run balanced (zigzag, reordered inside the call).
WINDOWED = [
    ("causal_window", dict(is_causal=True, local_window_size=(6, 0)), None),
    ("window_mask_keys", dict(local_window_size=(5, 9)), "keys"),
    ("causal_mask", dict(is_causal=True), "full"),
    ("br_wide_window_mask", dict(is_causal=True, local_window_size=(20, 0),
                                 causal_alignment="bottom_right"), "full"),
]


@pytest.mark.parametrize("name,kw,mask", WINDOWED, ids=[w[0] for w in WINDOWED])
def test_sequence_sharding_runs_windows_and_masks_in_the_ring(name, kw, mask):
  lay = Layout(name, (4,), P(None, "x"), k=2, t=64, mask=mask)
  qkv, extra, ct = _inputs(lay)

  def fwd_bwd(qkv, extra, ct):
    f = lambda qkv: pf.flash_attention(*qkv, implementation="triton",
                                       context_parallel="ring", **kw, **extra)
    out, vjp = jax.vjp(f, qkv)
    return out, vjp(ct)[0]

  want = jax.jit(fwd_bwd)(qkv, extra, ct)
  s_qkv, s_extra, s_ct = _sequence_shards(lay, qkv, extra, ct)
  found, compiled = _collectives(jax.jit(fwd_bwd), s_qkv, s_extra, s_ct)
  assert found == ["collective-permute"], found
  got = compiled(s_qkv, s_extra, s_ct)
  _check_equal(got, want)
  _check_sharding(got, (s_qkv[0], s_qkv))


# --- Ulysses under jit (context_parallel="ulysses") ---------------------------
# The 1-D and heads x sequence layouts of the rings above (batch x sequence:
# test_batch_heads_sequence_mesh), causal; 2 query heads over 4 sequence
# shards (they do not split: the ring runs); and a [B, N, T, S] mask over
# its rows (its rows go to the heads' owners by an all-to-all) with a
# window, bottom-right.  Each device gathers the whole sequence of its
# heads by all-to-alls (GQA: kv heads repeated where they do not split),
# the segment ids by an all-gather; no collective-permute.
_CAUSAL = dict(is_causal=True)
ULYSSES = [(lay, _CAUSAL) for lay in RINGS[:2]] + [
    (Layout("sequence_2_heads_ring", (4,), P(None, "x"), n=2, k=2, t=32),
     _CAUSAL),
    (Layout("mask_window_br", (4,), P(None, "x"), k=2, t=32, mask="full"),
     dict(is_causal=True, local_window_size=(9, 0),
          causal_alignment="bottom_right"))]


@pytest.mark.parametrize("lay,kw", ULYSSES, ids=[str(u[0]) for u in ULYSSES])
def test_sequence_sharding_runs_ulysses(lay, kw):
  qkv, extra, ct = _inputs(lay)

  def fwd_bwd(qkv, extra, ct, context_parallel=None):
    f = lambda qkv: pf.flash_attention(
        *qkv, implementation="triton", context_parallel=context_parallel,
        **kw, **extra)
    out, vjp = jax.vjp(f, qkv)
    return out, vjp(ct)[0]

  want = jax.jit(fwd_bwd)(qkv, extra, ct)
  s_qkv, s_extra, s_ct = _sequence_shards(lay, qkv, extra, ct)
  found, compiled = _collectives(
      jax.jit(functools.partial(fwd_bwd, context_parallel="ulysses")),
      s_qkv, s_extra, s_ct)
  assert found == (["collective-permute"] if lay.name.endswith("_ring")
                   else ["all-gather", "all-to-all"]), found
  got = compiled(s_qkv, s_extra, s_ct)
  _check_equal(got, want)
  _check_sharding(got, (s_qkv[0], s_qkv))


# --- the default (context_parallel=None) -------------------------------------
# Ulysses where the local query heads split over the sequence's devices (4
# heads over 4, and 2 over the 2 of a heads x sequence mesh; the segment
# ids' all-gather besides), else the ring: 2 query heads, or GQA 6 over 2
# kv heads, over 4 devices.  One JAX process here; several: the ring
# (test_default_context_parallel_rule).
DEFAULTS = [(lay, ["all-gather", "all-to-all"]) for lay in RINGS[:2]] + [
    (Layout(name, (4,), P(None, "x"), n=n, k=2, t=32), ["collective-permute"])
    for name, n in (("sequence_2_heads", 2), ("sequence_gqa_6_heads", 6))]


@pytest.mark.parametrize("lay,collectives", DEFAULTS,
                         ids=[str(d[0]) for d in DEFAULTS])
def test_sequence_sharding_default_picks_ulysses_or_the_ring(lay, collectives):
  _check_sequence_sharding(lay, _jitted("triton"), collectives)


def test_default_context_parallel_rule(monkeypatch):
  from pallas_flash import ulysses
  # (context_parallel, local query heads, devices of the sequence's axes)
  assert ulysses.chosen("auto", 4, 4) and ulysses.chosen("auto", 8, 2)
  assert ulysses.chosen("ulysses", 4, 4)
  assert not ulysses.chosen("auto", 2, 4) and not ulysses.chosen("auto", 6, 4)
  assert not ulysses.chosen("ulysses", 6, 4)
  assert not ulysses.chosen("ring", 4, 4)
  # Several JAX processes (hosts): the default is the ring; an explicit
  # "ulysses" stays Ulysses.
  monkeypatch.setattr(jax, "process_count", lambda: 2)
  assert not ulysses.chosen("auto", 4, 4)
  assert ulysses.chosen("ulysses", 4, 4)


# --- batch x heads x sequence: a 3-D mesh in one jit --------------------------
_MESH_3D_DEVICES = 8


def test_batch_heads_sequence_mesh():
  """Batch over "x", heads over "y" (GQA: whole kv-head groups), the
  sequence over "z" (2 x 2 x 2 = 8 devices): the ring and Ulysses each run
  per (batch, head) group, in one jit, values and gradients equal to the
  one-device call; the ring moves data by collective-permutes only, Ulysses
  by all-to-alls (and the segment ids' all-gather), over "z" alone.  With
  fewer than 8 devices the test reruns itself in a subprocess on 8 CPU
  devices (this process's count is fixed when its client starts)."""
  if len(jax.devices()) < _MESH_3D_DEVICES:
    _rerun_on_cpu_devices("test_batch_heads_sequence_mesh", _MESH_3D_DEVICES)
    return
  lay = Layout("batch_heads_sequence", (2, 2, 2), P("x", "z", "y"), k=2,
               t=32)
  qkv, extra, ct = _inputs(lay)
  want = _jitted("triton")[1](qkv, extra, ct)
  mesh = jax.make_mesh(lay.mesh, ("x", "y", "z"),
                       axis_types=(AxisType.Auto,) * 3,
                       devices=jax.devices()[:_MESH_3D_DEVICES])
  s_qkv, s_extra, s_ct = _sequence_shards(lay, qkv, extra, ct, mesh)
  for context_parallel, collectives in (
      ("ring", ["collective-permute"]),
      ("ulysses", ["all-gather", "all-to-all"])):
    def fwd_bwd(qkv, extra, ct):
      f = lambda qkv: pf.flash_attention(
          *qkv, is_causal=True, implementation="triton",
          context_parallel=context_parallel, **extra)
      out, vjp = jax.vjp(f, qkv)
      return out, vjp(ct)[0]

    found, compiled = _collectives(jax.jit(fwd_bwd), s_qkv, s_extra, s_ct)
    assert found == collectives, (context_parallel, found)
    # Every collective runs within a sequence group (mesh axis "z": the
    # partition ids 2i, 2i + 1), never across batch or head shards.
    text = compiled.as_text()
    groups = re.findall(r"replica_groups=mesh\[[^\]]*\] \{([^}]*)\}", text)
    pairs = [(int(a), int(b)) for a, b in re.findall(
        r"\{(\d+),(\d+)\}", " ".join(re.findall(
            r"source_target_pairs=\{((?:\{\d+,\d+\},?)+)\}", text)))]
    assert groups or pairs
    assert all(g == "'z'" for g in groups), groups
    assert all(min(a, b) % 2 == 0 and abs(a - b) == 1 for a, b in pairs)
    got = compiled(s_qkv, s_extra, s_ct)
    _check_equal(got, want, err_msg=context_parallel)
    _check_sharding(got, (s_qkv[0], s_qkv))


def _rerun_on_cpu_devices(test: str, devices: int):
  """Runs ``test`` of this file in a fresh pytest on ``devices`` CPU
  devices."""
  run = subprocess.run(
      [sys.executable, "-m", "pytest", f"{__file__}::{test}", "-q",
       "-p", "no:cacheprovider"], cwd=cases.ROOT, env=cases.cpu_env(devices),
      capture_output=True,
      text=True, timeout=600)
  assert run.returncode == 0 and re.search(r"\b1 passed", run.stdout), (
      run.stdout[-6000:] + run.stderr[-3000:])
