"""Ulysses (pallas_flash.ulysses_attention) inside shard_map.

On 4 devices (CPU: tests/conftest.py forces 4 host devices; 2 or 3 GPUs:
2) the sequence is split into 4 (2) contiguous shares; output and gradients
(random cotangent) must equal the float32 reference on the whole sequence,
and the compiled program may move data only by all-to-alls (plus the
all-gather of segment ids, and of a dense mask broadcast over heads).
The automatic path (``flash_attention(context_parallel="ulysses")`` under
``jit``) is tested in tests/test_sharding.py.
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

NUM = 4 if len(jax.devices()) >= 4 else 2  # devices of the axis
pytestmark = pytest.mark.skipif(len(jax.devices()) < 2,
                                reason="needs 2 devices (4 host devices on CPU)")

_COLLECTIVE = re.compile(r"\b(all-gather|all-reduce|all-to-all|reduce-scatter|"
                         r"collective-permute)(?:-start)?\(")


def _mask(shape: str, b, n, t, seed=5):
  """A dense mask of the whole sequence: "full" [B, N, T, S], "rows"
  [B, 1, T, S] (broadcast over heads: its rows are all-gathered) or
  "head_keys" [B, N, 1, S] (broadcast over rows: replicated, each device
  slices its heads)."""
  dims = {"full": (b, n, t, t), "rows": (b, 1, t, t),
          "head_keys": (b, n, 1, t)}[shape]
  return jnp.asarray(np.random.default_rng(seed).random(dims) < 0.75)


# T = 32 over 4 devices (shares of 8 rows), 4 query heads (one per device).
# GQA with K = 2 and MQA: the kv heads are repeated to 4 before the
# all-to-all; causal top-left and bottom-right (ragged lengths: diagonals at
# kv_len - q_len per batch row), windows, packed segment ids, soft-cap and
# the three shapes of dense mask.
CASES = [
    (Case("causal_gqa_cap", t=32, s=32, n=4, k=2, h=32, causal=True,
          soft_cap=5.0), None),
    (Case("mqa_segments_lengths", t=32, s=32, n=4, k=1, h=32, segments=True,
          q_lengths=(32, 15), kv_lengths=(25, 32)), "head_keys"),
    (Case("window_br_lengths", t=32, s=32, n=4, k=4, h=32, causal=True,
          bottom_right=True, window=(6, 0), q_lengths=(21, 30),
          kv_lengths=(32, 11)), "rows"),
    (Case("mask_full_causal_gqa", t=32, s=32, n=4, k=2, h=32, causal=True,
          window=(5, 2)), "full"),
]


def _spec(name, x):
  """in_specs: lengths replicated, segment ids shared like q, a dense mask
  over its rows (all its columns on every device), or replicated where it
  has one row."""
  if x.ndim == 1:
    return P()
  if name == "mask":
    return P(None, None, "x") if x.shape[2] != 1 else P()
  return P(None, "x")


@pytest.mark.parametrize("case,mask", CASES, ids=lambda c: str(c))
def test_ulysses_matches_reference(case, mask):
  mesh = jax.make_mesh((NUM,), ("x",), devices=jax.devices()[:NUM],
                       axis_types=(jax.sharding.AxisType.Auto,))
  q, k, v, kw = case.inputs()
  if mask is not None:
    kw["mask"] = _mask(mask, q.shape[0], q.shape[2], q.shape[1])
  do = jax.random.normal(jax.random.key(7), q.shape, q.dtype)
  arrays = {name: x for name, x in kw.items() if isinstance(x, jax.Array)}
  flags = {name: x for name, x in kw.items() if name not in arrays}
  ulysses = jax.shard_map(
      lambda q, k, v, arrays: pf.ulysses_attention(
          q, k, v, axis_name="x", implementation="triton", **flags,
          **arrays),
      mesh=mesh, in_specs=(P(None, "x"),) * 3 + (
          {name: _spec(name, x) for name, x in arrays.items()},),
      out_specs=P(None, "x"), check_vma=False)

  def fwd_bwd(q, k, v, do, arrays):
    out, vjp = jax.vjp(lambda *a: ulysses(*a, arrays), q, k, v)
    return (out, *vjp(do))

  compiled = jax.jit(fwd_bwd).lower(q, k, v, do, arrays).compile()
  got = compiled(q, k, v, do, arrays)
  ref = functools.partial(pf.flash_attention, implementation="xla", **kw)
  ref_out, ref_vjp = jax.vjp(ref, q, k, v)
  for name, g, r in zip(["out", "dq", "dk", "dv"], got,
                        [ref_out, *ref_vjp(do)]):
    tol = 2e-5 if name == "out" else 1e-4
    np.testing.assert_allclose(g, r, atol=tol, rtol=tol, err_msg=name)
  found = _COLLECTIVE.findall(compiled.as_text())
  gathers = "query_segment_ids" in arrays or mask == "rows"
  assert set(found) == {"all-to-all"} | ({"all-gather"} if gathers else set())
  # q, k, v and out forward, d_out, dq, dk and dv backward (the residuals
  # stay in the head layout), and a full mask's rows.
  assert found.count("all-to-all") <= 8 + (mask == "full"), found


def test_ulysses_bad_input():
  mesh = jax.make_mesh((NUM,), ("x",), devices=jax.devices()[:NUM],
                       axis_types=(jax.sharding.AxisType.Auto,))

  def trace(n, **kw):
    q = jnp.zeros((1, 8 * NUM, n, 32))
    f = jax.shard_map(lambda q: pf.ulysses_attention(q, q, q, axis_name="x",
                                                     **kw),
                      mesh=mesh, in_specs=P(None, "x"), out_specs=P(None, "x"),
                      check_vma=False)
    return jax.eval_shape(f, q)

  with pytest.raises(NotImplementedError, match=f"multiple of {NUM}"):
    trace(NUM + 1, implementation="triton")
  with pytest.raises(NotImplementedError, match="triton"):
    trace(NUM, implementation="xla")
  with pytest.raises(ValueError, match="mask"):
    trace(NUM, implementation="triton", mask=jnp.ones((1, 1, 8, 8), bool))
  q = jnp.zeros((16, 2, 32))
  with pytest.raises(ValueError, match=r"\[B, T, N, H\]"):
    pf.ulysses_attention(q, q, q, axis_name="x")
  with pytest.raises(ValueError, match="context_parallel"):
    pf.flash_attention(q, q, q, context_parallel="allgather")
