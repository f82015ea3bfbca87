"""Ring attention (pallas_flash.ring_attention) inside shard_map.

On 4 devices (CPU: tests/conftest.py forces 4 host devices; 2 or 3 GPUs:
2) the sequence is split into 4 (2) shares (contiguous or zigzag); output
and gradients (random cotangent) must equal the float32 reference on the
whole sequence, and the compiled program may move data only by
collective-permutes.
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
]


@pytest.mark.parametrize("layout,case", CASES, ids=str)
def test_ring_matches_reference(layout, case):
  """Output and gradients equal the reference on the whole sequence; the
  program moves data by collective-permutes only.  The ring runs on arrays
  already in the layout's order (as real inputs are made: reordering a
  sharded array would move data), compared with the reference's results
  put in that order.  Lengths are whole-sequence ones (replicated); segment
  ids are shared like q and travel with their K/V share."""
  mesh = jax.make_mesh((NUM,), ("x",), devices=jax.devices()[:NUM],
                       axis_types=(jax.sharding.AxisType.Auto,))
  q, kk, v, kw = case.inputs()
  do = jax.random.normal(jax.random.key(7), q.shape, q.dtype)
  order = (functools.partial(pf.zigzag, num_devices=NUM) if layout == "zigzag"
           else lambda x: x)
  arrays = {name: (x if x.ndim == 1 else order(x)) for name, x in kw.items()
            if isinstance(x, jax.Array)}
  flags = {name: x for name, x in kw.items() if name not in arrays}
  ring = jax.shard_map(
      lambda q, k, v, arrays: pf.ring_attention(
          q, k, v, axis_name="x", layout=layout, implementation="triton",
          **flags, **arrays),
      mesh=mesh, in_specs=(P(None, "x"),) * 3 + (
          {name: P() if x.ndim == 1 else P(None, "x")
           for name, x in arrays.items()},),
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
