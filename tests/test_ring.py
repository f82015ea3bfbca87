"""Ring attention (pallas_flash.ring_attention) inside shard_map.

On 4 devices (CPU: tests/conftest.py forces 4 host devices) the sequence is
split into 4 contiguous chunks; output and gradients (random cotangent)
must equal the float32 reference on the whole sequence, and the compiled
program may move data only by collective-permutes.
"""
from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import pallas_flash as pf
from cases import Case

pytestmark = pytest.mark.skipif(len(jax.devices()) < 4,
                                reason="needs 4 devices (4 host devices on CPU)")

_OTHER_COLLECTIVES = re.compile(r"all-gather|all-reduce|all-to-all|"
                                r"reduce-scatter")


def _inputs(n, k, t=64, h=32, seed=0):
  ks = jax.random.split(jax.random.key(seed), 4)
  q = jax.random.normal(ks[0], (2, t, n, h), jnp.float32)
  kv = [jax.random.normal(kk, (2, t, k, h), jnp.float32) for kk in ks[1:3]]
  do = jax.random.normal(ks[3], (2, t, n, h), jnp.float32)
  return q, *kv, do


def _ring_fn(mesh, layout, **kw):
  """(ring attention on global arrays in natural order, the shard_map'd ring
  alone on arrays already in ``layout`` order)."""
  spec = P(None, "x")
  ring = jax.jit(jax.shard_map(
      functools.partial(pf.ring_attention, axis_name="x", layout=layout,
                        implementation="triton", **kw),
      mesh=mesh, in_specs=(spec,) * 3, out_specs=spec, check_vma=False))
  if layout == "contiguous":
    return ring, ring
  # Reordering a sharded array moves data (all-to-all): real inputs are
  # produced in zigzag order instead; here it only checks the result.
  zz = functools.partial(pf.zigzag, num_devices=4)
  return jax.jit(lambda q, k, v: zz(ring(zz(q), zz(k), zz(v)),
                                    inverse=True)), ring


@pytest.mark.parametrize("layout,causal,n,k", [
    ("contiguous", False, 2, 2),
    ("contiguous", True, 4, 2),  # GQA 4/2
    ("zigzag", True, 2, 2),
    ("zigzag", True, 4, 1),  # MQA
], ids=str)
def test_ring_matches_reference(layout, causal, n, k):
  mesh = jax.make_mesh((4,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
  q, kk, v, do = _inputs(n, k)
  cap = 5.0 if causal else None
  ring, ring_alone = _ring_fn(mesh, layout, is_causal=causal,
                              logits_soft_cap=cap)
  ref = functools.partial(pf.flash_attention, is_causal=causal,
                          logits_soft_cap=cap, implementation="xla")
  out, vjp = jax.vjp(ring, q, kk, v)
  ref_out, ref_vjp = jax.vjp(ref, q, kk, v)
  np.testing.assert_allclose(out, ref_out, atol=2e-5, rtol=2e-5)
  for name, g, r in zip("qkv", vjp(do), ref_vjp(do)):
    np.testing.assert_allclose(g, r, atol=1e-4, rtol=1e-4, err_msg=name)
  hlo = jax.jit(lambda *a: jax.vjp(ring_alone, *a[:3])[1](a[3])).lower(
      q, kk, v, do).compile().as_text()
  assert "collective-permute" in hlo
  assert not _OTHER_COLLECTIVES.search(hlo), _OTHER_COLLECTIVES.findall(hlo)


# Lengths of the whole sequence (T = 32 over 4 devices: the padding starts
# inside a device's share, and for zigzag inside its second chunk), packed
# segment ids (padding tokens -1), GQA / MQA, causal (top-left) and not.
MASKED = [
    ("contiguous", Case("lengths_gqa", t=32, s=32, n=4, k=2, h=32,
                        causal=True, q_lengths=(21, 32),
                        kv_lengths=(32, 11))),
    ("zigzag", Case("segments_lengths", t=32, s=32, h=32, causal=True,
                    segments=True, kv_lengths=(25, 9))),
    ("contiguous", Case("segments_full", t=32, s=32, n=4, k=1, h=32,
                        segments=True, q_lengths=(32, 15))),
]


@pytest.mark.parametrize("layout,case", MASKED, ids=str)
def test_ring_masks_match_reference(layout, case):
  """Lengths are whole-sequence ones (replicated); segment ids are shared
  like q (in the layout's order) and travel with their K/V share."""
  mesh = jax.make_mesh((4,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
  q, kk, v, kw = case.inputs()
  do = jax.random.normal(jax.random.key(7), q.shape, q.dtype)
  order = (functools.partial(pf.zigzag, num_devices=4) if layout == "zigzag"
           else lambda x: x)
  arrays = {name: (x if x.ndim == 1 else order(x)) for name, x in kw.items()
            if not isinstance(x, (bool, str))}
  flags = {name: x for name, x in kw.items() if name not in arrays}
  ring = jax.jit(jax.shard_map(
      lambda q, k, v, arrays: pf.ring_attention(
          q, k, v, axis_name="x", layout=layout, implementation="triton",
          **flags, **arrays),
      mesh=mesh, in_specs=(P(None, "x"),) * 3 + (
          {name: P() if x.ndim == 1 else P(None, "x")
           for name, x in arrays.items()},),
      out_specs=P(None, "x"), check_vma=False))
  ref = functools.partial(pf.flash_attention, implementation="xla", **kw)
  out, vjp = jax.vjp(lambda *a: ring(*a, arrays), *(order(x) for x in
                                                    (q, kk, v)))
  ref_out, ref_vjp = jax.vjp(ref, q, kk, v)
  np.testing.assert_allclose(out, order(ref_out), atol=2e-5, rtol=2e-5)
  for name, g, r in zip("qkv", vjp(order(do)), ref_vjp(do)):
    np.testing.assert_allclose(g, order(r), atol=1e-4, rtol=1e-4,
                               err_msg=name)


def test_zigzag_round_trip():
  x = jnp.arange(2 * 16).reshape(2, 16)
  np.testing.assert_array_equal(
      pf.zigzag(x, 2, axis=1)[0], [0, 1, 2, 3, 12, 13, 14, 15, 4, 5, 6, 7,
                                   8, 9, 10, 11])
  np.testing.assert_array_equal(
      pf.zigzag(pf.zigzag(x, 2), 2, inverse=True), x)


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
  with pytest.raises(NotImplementedError, match="bottom_right"):
    pf.ring_attention(q, q, q, axis_name="x", is_causal=True,
                      causal_alignment="bottom_right",
                      key_value_seq_lengths=jnp.array([9]))
  with pytest.raises(ValueError, match="query_segment_ids"):
    pf.ring_attention(q, q, q, axis_name="x",
                      query_segment_ids=jnp.zeros((1, 15), jnp.int32))
