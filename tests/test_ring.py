"""Ring attention (pallas_flash.ring_attention) inside shard_map.

On 4 devices (CPU: tests/conftest.py forces 4 host devices; 2 or 3 GPUs:
2) the sequence is split into 4 (2) shares (contiguous or zigzag); output
and gradients (random cotangent) must equal the float32 reference on the
whole sequence, and the compiled program may move data only by
collective-permutes.
"""
from __future__ import annotations

import collections
import functools
import re

import jax
from jax import lax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import pallas_flash as pf
from cases import Case

NUM = 4 if len(jax.devices()) >= 4 else 2  # devices of the ring
pytestmark = pytest.mark.skipif(len(jax.devices()) < 2,
                                reason="needs 2 devices (4 host devices on CPU)")

_OTHER_COLLECTIVES = re.compile(r"all-gather|all-reduce|all-to-all|"
                                r"reduce-scatter")


# T = 32 over 4 devices (zigzag: 8 chunks of 4 rows).  Lengths of the whole
# sequence start the padding inside a device's share, and for zigzag inside
# its second chunk; packed segment ids (padding tokens -1); MHA / GQA / MQA;
# causal (top-left) and not; soft-cap.  Bottom-right with ragged lengths puts
# each batch row's diagonal at kv_len - q_len, inside a share: above the
# first key (offsets 11, 19) or below it (-19; only key lengths given:
# kv_len - T = -23), the rows above it fully masked, and a batch row of no
# queries (q_len 0).
CASES = [
    ("contiguous", Case("full", t=32, s=32, h=32)),
    ("contiguous", Case("causal_gqa_cap", t=32, s=32, n=4, k=2, h=32,
                        causal=True, soft_cap=5.0)),
    ("zigzag", Case("causal", t=32, s=32, h=32, causal=True)),
    ("zigzag", Case("causal_mqa_cap", t=32, s=32, n=4, k=1, h=32,
                    causal=True, soft_cap=5.0)),
    ("contiguous", Case("lengths_gqa", t=32, s=32, n=4, k=2, h=32,
                        causal=True, q_lengths=(21, 32),
                        kv_lengths=(32, 11))),
    ("zigzag", Case("segments_lengths", t=32, s=32, h=32, causal=True,
                    segments=True, kv_lengths=(25, 9))),
    ("contiguous", Case("segments_full", t=32, s=32, n=4, k=1, h=32,
                        segments=True, q_lengths=(32, 15))),
    ("contiguous", Case("br_lengths_gqa_cap", t=32, s=32, n=4, k=2, h=32,
                        causal=True, bottom_right=True, q_lengths=(21, 30),
                        kv_lengths=(32, 11), soft_cap=5.0)),
    ("contiguous", Case("br_kv_lengths_mqa", t=32, s=32, n=4, k=1, h=32,
                        causal=True, bottom_right=True, kv_lengths=(9, 32))),
    ("zigzag", Case("br_lengths_segments", t=32, s=32, h=32, causal=True,
                    bottom_right=True, segments=True, q_lengths=(0, 13),
                    kv_lengths=(25, 32))),
    # Windows (shares of 8 rows, zigzag chunks of 4): narrower than a share
    # (steps left out of the ring, blocks skipped per device), wider than
    # one, non-causal and one-sided; bottom-right with ragged lengths places
    # the window per batch row.  Dense masks: a stripe of rows against all
    # keys ("full", "heads"), a key mask broadcast over rows ("keys").
    ("contiguous", Case("window_causal_gqa", t=32, s=32, n=4, k=2, h=32,
                        causal=True, window=(3, 0))),
    ("zigzag", Case("window_wide_mask_mqa", t=32, s=32, n=4, k=1, h=32,
                    causal=True, window=(11, 0), dense_mask="full")),
    ("contiguous", Case("window_full", t=32, s=32, h=32, window=(5, 2))),
    ("zigzag", Case("window_br_lengths", t=32, s=32, h=32, causal=True,
                    bottom_right=True, window=(6, 0), q_lengths=(21, 30),
                    kv_lengths=(32, 11))),
    ("contiguous", Case("mask_keys_window", t=32, s=32, h=32,
                        dense_mask="keys", window=(4, 4))),
    ("contiguous", Case("mask_heads_causal", t=32, s=32, n=4, k=1, h=32,
                        causal=True, dense_mask="heads")),
]


def _seq_mesh(num):
  """A 1-D mesh "x" of the first `num` devices (skips with fewer)."""
  if len(jax.devices()) < num:
    pytest.skip(f"needs {num} devices")
  return jax.make_mesh((num,), ("x",), devices=jax.devices()[:num],
                       axis_types=(jax.sharding.AxisType.Auto,))


def _order(layout, x, name=""):
  """A global array in the layout's order: zigzag reorders the sequence
  axis (a dense mask: its rows and its columns; size-1 dims stay)."""
  if layout != "zigzag" or x.ndim == 1:
    return x
  axes = (2, 3) if name == "mask" else (1,)
  for axis in axes:
    if x.shape[axis] != 1:
      x = pf.zigzag(x, NUM, axis=axis)
  return x


def _spec(name, x):
  """in_specs of a ring argument: lengths replicated, segment ids shared
  like q, a dense mask over its rows (all its columns on every device)."""
  if x.ndim == 1:
    return P()
  if name == "mask":
    return P(None, None, "x") if x.shape[2] != 1 else P()
  return P(None, "x")


@pytest.mark.parametrize("layout,case", CASES, ids=str)
def test_ring_matches_reference(layout, case):
  """Output and gradients equal the reference on the whole sequence; the
  program moves data by collective-permutes only.  The ring runs on arrays
  already in the layout's order (as real inputs are made: reordering a
  sharded array would move data), compared with the reference's results
  put in that order.  Lengths are whole-sequence ones (replicated); segment
  ids are shared like q and travel with their K/V share."""
  mesh = _seq_mesh(NUM)
  q, kk, v, kw = case.inputs()
  do = jax.random.normal(jax.random.key(7), q.shape, q.dtype)
  order = functools.partial(_order, layout)
  arrays = {name: order(x, name) for name, x in kw.items()
            if isinstance(x, jax.Array)}
  flags = {name: x for name, x in kw.items() if name not in arrays}
  ring = jax.shard_map(
      lambda q, k, v, arrays: pf.ring_attention(
          q, k, v, axis_name="x", layout=layout, implementation="triton",
          **flags, **arrays),
      mesh=mesh, in_specs=(P(None, "x"),) * 3 + (
          {name: _spec(name, x) for name, x in arrays.items()},),
      out_specs=P(None, "x"), check_vma=False)

  def fwd_bwd(q, k, v, do, arrays):
    out, vjp = jax.vjp(lambda *a: ring(*a, arrays), q, k, v)
    return (out, *vjp(do))

  args = (*(order(x) for x in (q, kk, v, do)), arrays)
  compiled = jax.jit(fwd_bwd).lower(*args).compile()
  got = compiled(*args)
  ref = functools.partial(pf.flash_attention, implementation="xla", **kw)
  ref_out, ref_vjp = jax.vjp(ref, q, kk, v)
  for name, g, r in zip(["out", "dq", "dk", "dv"], got,
                        [ref_out, *ref_vjp(do)]):
    tol = 2e-5 if name == "out" else 1e-4
    np.testing.assert_allclose(g, order(r), atol=tol, rtol=tol, err_msg=name)
  hlo = compiled.as_text()
  assert "collective-permute" in hlo
  assert not _OTHER_COLLECTIVES.search(hlo), _OTHER_COLLECTIVES.findall(hlo)


def test_zigzag_round_trip():
  x = jnp.arange(2 * 16).reshape(2, 16)
  np.testing.assert_array_equal(
      pf.zigzag(x, 2, axis=1)[0], [0, 1, 2, 3, 12, 13, 14, 15, 4, 5, 6, 7,
                                   8, 9, 10, 11])
  np.testing.assert_array_equal(
      pf.zigzag(pf.zigzag(x, 2), 2, inverse=True), x)


def test_packed_transfer_round_trip():
  """A ring step's arrays travel packed in one 16-bit buffer: unpacked, they
  are the same bits (bf16 K / V, f32 dK / dV with NaN and -0, int32 ids)."""
  from pallas_flash import ring
  key = jax.random.key(0)
  xs = [jax.random.normal(key, (2, 5, 3, 6), jnp.bfloat16),
        jnp.array([[1.5, -0.0, jnp.nan], [jnp.inf, 3e-39, -7.0]], jnp.float32),
        jnp.arange(-3, 4, dtype=jnp.int32).reshape(1, 7)]
  buf = ring._pack(xs)
  assert buf.dtype == jnp.uint16 and buf.size == 180 + 2 * 6 + 2 * 7
  for got, want in zip(ring._unpack(buf, xs), xs):
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(
        lax.bitcast_convert_type(got, jnp.uint16),
        lax.bitcast_convert_type(want, jnp.uint16))


def test_ring_bad_input():
  q = jnp.zeros((1, 16, 2, 32))
  with pytest.raises(ValueError, match="layout"):
    pf.ring_attention(q, q, q, axis_name="x", layout="striped")
  with pytest.raises(ValueError, match="even"):
    pf.ring_attention(q[:, :7], q[:, :7], q[:, :7], axis_name="x",
                      layout="zigzag")
  with pytest.raises(ValueError, match="equal chunks"):
    pf.ring_attention(q, q[:, :8], q[:, :8], axis_name="x", is_causal=True)
  with pytest.raises(ValueError, match=r"\[B, T, N, H\]"):
    pf.ring_attention(q[0], q[0], q[0], axis_name="x")
  with pytest.raises(NotImplementedError, match="triton"):
    pf.ring_attention(q, q, q, axis_name="x", implementation="xla")
  with pytest.raises(ValueError, match="query_segment_ids"):
    pf.ring_attention(q, q, q, axis_name="x",
                      query_segment_ids=jnp.zeros((1, 15), jnp.int32))


def _counting_kernels(monkeypatch):
  """Patches the ring's forward kernels to count, per device of axis "x",
  the calls that run (not those a lax.cond skips)."""
  from pallas_flash import _dispatch
  real, calls = _dispatch.forward_fn, collections.Counter()

  def counted(params):
    fn = real(params)

    def run(q, k, v, arrays, params):
      jax.debug.callback(lambda i: calls.update([int(i)]),
                         lax.axis_index("x"))
      return fn(q, k, v, arrays, params)
    return run

  monkeypatch.setattr(_dispatch, "forward_fn", counted)
  return calls


# Shares of 8 rows on 4 devices.  Causal window 3: device 0 sees only its
# own share, the others also the last keys of the share before (step 1);
# steps 2, 3 leave the ring.  Window (5, 2): the share before (step 1, not
# on device 0) and the first keys of the share after (step 3, which brings
# device me + 1's share; not on device 3); step 2 leaves the ring.
@pytest.mark.skipif(NUM != 4, reason="counts of 4 devices")
@pytest.mark.parametrize("window,causal,calls,hops", [
    ((3, 0), True, [1, 2, 2, 2], 1), ((5, 2), False, [2, 3, 3, 2], 2)])
def test_window_skips_steps_no_row_sees(monkeypatch, window, causal, calls,
                                        hops):
  counts = _counting_kernels(monkeypatch)
  mesh = _seq_mesh(NUM)
  q, k, v, kw = Case("w", t=32, s=32, h=32, causal=causal,
                     window=window).inputs()
  ring = jax.jit(jax.shard_map(
      lambda q, k, v: pf.ring_attention(
          q, k, v, axis_name="x", is_causal=causal, local_window_size=window,
          implementation="triton"),
      mesh=mesh, in_specs=(P(None, "x"),) * 3, out_specs=P(None, "x"),
      check_vma=False))
  compiled = ring.lower(q, k, v).compile()
  out = compiled(q, k, v)
  jax.effects_barrier()
  assert [counts[i] for i in range(NUM)] == calls
  # K and V hop once per step change: one collective-permute each, or one
  # for both where XLA combines them (on GPUs, 2026-11-28).
  permutes = len(re.findall(r"collective-permute(?:-start)?\(",
                            compiled.as_text()))
  assert hops <= permutes <= 2 * hops, permutes
  np.testing.assert_allclose(
      out, pf.flash_attention(q, k, v, implementation="xla", **kw),
      atol=2e-5, rtol=2e-5)


def test_automatic_ring_balances_causal_work(monkeypatch):
  # sharding.py's per-shard calls (ring.backend_calls) take contiguous
  # shares; causal, they reorder them into the zigzag layout, so every
  # device runs one kernel call a step (contiguous: device i runs i + 1),
  # and return out and lse in the contiguous order.  Top-left without a
  # window, each device first runs the two diagonal chunks of its
  # contiguous share (two calls, before the reordering), which the ring's
  # step 0 leaves out: NUM + 2 calls on every device.
  from pallas_flash import _dispatch, masks, reference, ring
  counts = _counting_kernels(monkeypatch)
  mesh = _seq_mesh(NUM)
  q, k, v, kw = Case("c", t=32, s=32, n=4, k=2, h=32, causal=True,
                     segments=True).inputs()
  q, k, v, arrays, spec, scale, _, _ = _dispatch.validate(
      q, k, v, None, None, None, True, None, None, None, "triton",
      "top_left", kw["query_segment_ids"], kw["key_value_segment_ids"], None)
  params = _dispatch.plan(q, k, v, arrays, spec, scale, None, 0.0, "triton",
                          None)
  fwd, _ = ring.backend_calls(params, "x")
  seq = P(None, "x")
  specs = masks.MaskArrays(P(), P(), seq, seq)
  out, lse = jax.jit(jax.shard_map(
      fwd, mesh=mesh, in_specs=(seq, seq, seq, specs),
      out_specs=(seq, P(None, None, "x")), check_vma=False))(q, k, v, arrays)
  jax.effects_barrier()
  assert [counts[i] for i in range(NUM)] == [NUM + 2] * NUM
  want, want_lse = reference.attention(q, k, v, arrays, spec=spec,
                                      scale=scale, logits_soft_cap=None)
  np.testing.assert_allclose(out, want, atol=2e-5, rtol=2e-5)
  seen = want_lse != masks.MASKED_LSE  # the ring gives +inf there
  np.testing.assert_allclose(
      jnp.where(seen, jnp.transpose(lse, (0, 2, 1)), 0.0),
      jnp.where(seen, want_lse, 0.0), atol=1e-5, rtol=1e-5)


def test_ring_mask_needs_every_key_column():
  # A device's mask rows span the keys of the whole sequence (P * S).
  mesh = _seq_mesh(NUM)
  ring = jax.shard_map(
      lambda q: pf.ring_attention(q, q, q, axis_name="x",
                                  mask=jnp.ones((1, 1, 16, 16), bool)),
      mesh=mesh, in_specs=P(None, "x"), out_specs=P(None, "x"),
      check_vma=False)
  with pytest.raises(ValueError, match=r"mask of shape \(1, 1, 16, 16\)"):
    jax.eval_shape(ring, jax.ShapeDtypeStruct((1, 16 * NUM, 2, 32),
                                              jnp.float32))


def test_block_visible_is_any_visible_pair():
  # masks.block_visible (how the ring skips a block) against the mask rules
  # pair by pair, for windows, causal or not, diagonals above and below.
  from pallas_flash import masks
  for causal in (False, True):
    for window in (None, (0, 0), (3, 0), (2, 5)):
      spec = masks.MaskSpec(is_causal=causal, window=window)
      for t, s, offset in ((8, 8, 0), (8, 8, -9), (8, 8, -8), (4, 8, 9),
                           (4, 8, 12), (8, 4, -3), (0, 8, 0), (8, 0, 0)):
        i, j = np.arange(t)[:, None], np.arange(s)[None]
        want = bool(np.any(masks.position_visible(spec, i, j, t, s, offset)))
        got = masks.block_visible(spec, t, s, offset, xp=np)
        assert bool(got) == want, (spec, t, s, offset)
        assert bool(masks.block_visible(spec, jnp.int32(t), jnp.int32(s),
                                        jnp.int32(offset))) == want


def _permutes(hlo):
  """(count, 16-bit words) of the collective-permutes in compiled HLO (the
  ring packs every transfer in one uint16 buffer, ``ring._pack``)."""
  lines = [line for line in hlo.splitlines()
           if re.search(r"collective-permute(?:-start)?\(", line)]
  words = [int(re.search(r"= \(?u16\[(\d+)\]", line).group(1))
           for line in lines]
  return len(lines), sum(words)


# The automatic ring (sharding.py under jit, context_parallel="ring"),
# causal: contiguous shares reordered into the zigzag layout and back.  Its
# backward sends dK / dV from where the last ring step leaves them straight
# to their contiguous homes (``held_at``), one move instead of the hop home
# and the reorder: the fwd+bwd's permutes (16-bit words) went from 8
# (34944) to 7 (30848) on 2 devices, from 16 (78080) to 16 (71936) on 4
# (one permute of dK / dV, two of dQ, against the hop and two of all three).
# The backward then reordered delta = rowsum(dO * O) ([B, N, T] f32,
# computed once on the contiguous share) instead of out: 7 (28864) on 2
# devices, 16 (67968) on 4, gradients bit-identical.
@pytest.mark.parametrize("num,permutes,words", [(2, 7, 28864),
                                                (4, 16, 67968)])
def test_automatic_ring_sends_gradients_home_once(num, permutes, words):
  from jax.sharding import NamedSharding
  mesh = _seq_mesh(num)
  rng = np.random.default_rng(0)
  t = 16 * num
  q, k, v, ct = (jnp.asarray(rng.standard_normal((2, t, heads, 32),
                                                 np.float32))
                 for heads in (2, 1, 1, 2))

  def fwd_bwd(q, k, v, ct):
    f = functools.partial(pf.flash_attention, is_causal=True,
                          implementation="triton", context_parallel="ring")
    out, vjp = jax.vjp(f, q, k, v)
    return out, *vjp(ct)

  want = jax.jit(fwd_bwd)(q, k, v, ct)
  args = [jax.device_put(x, NamedSharding(mesh, P(None, "x")))
          for x in (q, k, v, ct)]
  compiled = jax.jit(fwd_bwd).lower(*args).compile()
  for name, g, w in zip(["out", "dq", "dk", "dv"], compiled(*args), want):
    np.testing.assert_allclose(g, w, atol=2e-5, rtol=0, err_msg=name)
  hlo = compiled.as_text()
  assert not _OTHER_COLLECTIVES.search(hlo), _OTHER_COLLECTIVES.findall(hlo)
  if jax.default_backend() != "cpu":  # counted on the CPU's compiled HLO:
    return  # a GPU's collective passes rewrite the permutes (async, cycles)
  count, moved = _permutes(hlo)
  assert count <= permutes and moved <= words, (count, moved)


def _held(x, num, at, axis):
  """numpy: the contiguous global ``x`` as zigzag shares held at offset
  ``at``: device d's share is zigzag share (d - at) mod P, i.e. halves j,
  2P-1-j of the sequence (axis ``axis``) cut into 2P, j = (d - at) % P."""
  halves = np.split(x, 2 * num, axis=axis)
  share = lambda j: [halves[j], halves[2 * num - 1 - j]]
  return np.concatenate([h for d in range(num)
                         for h in share((d - at) % num)], axis=axis)


@pytest.mark.parametrize("num", [2, 4])
def test_reorder_back_from_held_shares(num):
  """ring._reorder's inverse with ``held_at``: zigzag shares held at any
  offset go back to contiguous shares, arrays of other offsets, dtypes and
  sequence axes in the same call (f32 at offset 0, bf16 and int32 at
  ``at``); one offset for all moves them in at most two permutes (one for
  P = 4, at = 3, the automatic ring's dK / dV), mixed offsets in at most
  four."""
  from pallas_flash import ring
  mesh = _seq_mesh(num)
  rows = 2 * num * 3  # halves of 3 rows
  xs = (np.arange(2 * rows * 3, dtype=np.float32).reshape(2, rows, 3),
        np.arange(2 * 5 * rows).reshape(2, 5, rows).astype(jnp.bfloat16),
        -np.arange(rows * 4, dtype=np.int32).reshape(1, rows, 4))
  axes = (1, 2, 1)
  specs = (P(None, "x"), P(None, None, "x"), P(None, "x"))
  for at in range(num):
    for held_at in ((0, at, at), at):
      ats = held_at if isinstance(held_at, tuple) else (at,) * 3
      back = jax.jit(jax.shard_map(
          lambda *xs: tuple(ring._reorder(list(xs), "x", axes, inverse=True,
                                          held_at=held_at)),
          mesh=mesh, in_specs=specs, out_specs=specs, check_vma=False))
      args = [_held(x, num, a, axis) for x, a, axis in zip(xs, ats, axes)]
      for got, want in zip(back(*args), xs):
        np.testing.assert_array_equal(np.asarray(got), want,
                                      err_msg=f"P={num} held_at={held_at}")
      if jax.default_backend() != "cpu":  # counted on the CPU's compiled
        continue  # HLO: a GPU's collective passes rewrite the permutes
      count, _ = _permutes(back.lower(*args).compile().as_text())
      most = (1 if (num, held_at) == (4, 3) else 2 if len(set(ats)) == 1
              else 4)
      assert count <= most, (held_at, count)


def _plan_pairs(num, me, step, diagonal_first):
  """The (query chunk, key chunk) pairs of the 2P chunks that ring._plan's
  block covers on zigzag device ``me`` at ring step ``step`` (visible
  pairs only), and its work in chunk pairs (a diagonal pair: 1/2)."""
  from pallas_flash import ring
  static = ring._Static(None, "x", is_causal=True, zigzag=True,
                        diagonal_first=diagonal_first)
  pred, block, other = ring._plan(static, step, me=me)
  blk = block if pred is None or pred else other
  chunks = lambda d: (d, 2 * num - 1 - d)
  src = (me - step) % num
  part = lambda cs, p: cs if p is None else (cs[p],)
  pairs = [(a, b) for a in part(chunks(me), blk.q_part)
           for b in part(chunks(src), blk.kv_part)]
  if not blk.causal:  # a full block: every pair of it visible
    assert all(a > b for a, b in pairs), (me, step, pairs)
  pairs = [(a, b) for a, b in pairs if a >= b]
  return pairs, sum(0.5 if a == b else 1 for a, b in pairs)


# The automatic ring's diagonal-first plan (ring._diagonals + ring._plan):
# device d first runs the diagonal pairs (2d, 2d), (2d+1, 2d+1) of its
# contiguous share; the zigzag ring then covers every other visible pair,
# each exactly once, and every device does the same work at every step
# (step 0: the pair (2P-1-d, d), one chunk pair; later steps two).
#
# Why not also leave the (2d+1, 2d) pairs to the local block (the whole
# contiguous causal share first): the zigzag device holding odd chunk c
# meets chunk c-1 at step 1 (odd devices) or step P-1 (even ones), so for
# P >= 4 half the devices do one pair and half two at those two steps;
# the ring's steps wait for the slowest, and the critical path grows by one
# chunk pair (2P+1 against 2P), more than the reordering it would hide.
@pytest.mark.parametrize("num", [2, 4, 8])
def test_diagonal_first_covers_every_pair_once(num):
  visible = collections.Counter(
      (a, b) for a in range(2 * num) for b in range(a + 1))
  for diagonal_first in (False, True):
    done = collections.Counter()
    if diagonal_first:
      done.update((c, c) for c in range(2 * num))  # ring._diagonals
    for step in range(num):
      work = set()
      for me in range(num):
        pairs, units = _plan_pairs(num, me, step, diagonal_first)
        done.update(pairs)
        work.add(units)
      want = 1 if diagonal_first and step == 0 else 2
      assert work == {want}, (diagonal_first, step, work)
    assert done == visible, (diagonal_first, done - visible, visible - done)
  # The whole contiguous share first would skip unequal work per step:
  # (odd c, c-1) at step 1 on odd devices, at step P-1 on even ones.
  per_step = [[sum(0.5 if a == b else 1
                   for a, b in _plan_pairs(num, me, step, False)[0]
                   if a // 2 != b // 2) for me in range(num)]
              for step in range(num)]
  critical = sum(max(w) for w in per_step)
  assert critical == (2 * num - 2 if num == 2 else 2 * num - 1), per_step


# The automatic ring on the diagonal-first path (causal top-left, no
# window): values and gradients under jit equal the one-device call on 2
# and 4 devices, f32 and bf16, MHA, GQA (2 query heads on 1 kv head), an
# odd head dim, and lengths that leave query rows with no key (their lse
# +inf: merged to zeros, never NaN); the compiled program moves data by
# collective-permutes only.
@pytest.mark.parametrize("num", [2, 4])
@pytest.mark.parametrize("dtype,heads,h,lengths", [
    ("float32", (2, 2), 32, False), ("float32", (2, 1), 40, False),
    ("bfloat16", (2, 1), 32, False), ("float32", (2, 1), 32, True)])
def test_automatic_ring_diagonal_first(num, dtype, heads, h, lengths):
  from jax.sharding import NamedSharding
  mesh = _seq_mesh(num)
  rng = np.random.default_rng(1)
  t = 16 * num
  q, k, v, ct = (jnp.asarray(rng.standard_normal((2, t, n, h), np.float32),
                             dtype)
                 for n in (heads[0], heads[1], heads[1], heads[0]))
  # Padding from inside the second chunk of device 0 (query rows past 6 on
  # batch row 1 see keys; rows of batch row 0 past 2 * t // 3 none, and
  # keys of batch row 1 past 5 are padding).
  extra = {} if not lengths else {
      "query_seq_lengths": jnp.array([2 * t // 3, t], jnp.int32),
      "key_value_seq_lengths": jnp.array([t, 5], jnp.int32)}

  def fwd_bwd(q, k, v, ct, extra):
    f = functools.partial(pf.flash_attention, is_causal=True,
                          implementation="triton", context_parallel="ring",
                          **extra)
    out, vjp = jax.vjp(f, q, k, v)
    return out, *vjp(ct)

  want = jax.jit(fwd_bwd)(q, k, v, ct, extra)
  args = [jax.device_put(x, NamedSharding(mesh, P(None, "x")))
          for x in (q, k, v, ct)]
  compiled = jax.jit(fwd_bwd).lower(*args, extra).compile()
  tol = 2e-5 if dtype == "float32" else 2e-2
  for name, g, w in zip(["out", "dq", "dk", "dv"], compiled(*args, extra),
                        want):
    assert g.dtype == w.dtype, name
    g, w = (np.asarray(x, np.float32) for x in (g, w))
    assert np.all(np.isfinite(g)), name
    np.testing.assert_allclose(g, w, atol=tol, rtol=tol, err_msg=name)
  hlo = compiled.as_text()
  assert not _OTHER_COLLECTIVES.search(hlo), _OTHER_COLLECTIVES.findall(hlo)
  assert "collective-permute" in hlo
