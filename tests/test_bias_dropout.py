"""Additive bias (with dbias), ALiBi and attention dropout in the kernels
(issue 14), against the f32 reference.

Run on the CPU in Pallas interpret mode and, unchanged, natively on a GPU
(``implementation=None`` there must fall back from Mosaic to the Triton
kernels for every one of these features); ``-m slow`` adds GPU-sized cases.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import pallas_flash as pf
from pallas_flash import masks
from cases import (TOL, Case, bias_grad_calls, bias_of as _bias,
                   check_gradients, rel_err)

IMPL = "triton"


def _check_vjp(case: Case, kw, bias=None, impl=IMPL, seed=0):
  """out and (dq, dk, dv[, dbias]) of ``impl`` against the f32 reference's
  VJP with the same random cotangent; returns the kernel's results."""
  return check_gradients(case, impl, seed, extra=kw, bias=bias)


BIAS_CASES = [
    Case("f32_causal_br_gqa", t=33, s=47, n=4, k=2, h=40, causal=True, bottom_right=True),
    Case("bf16_soft_cap_lengths", t=47, s=33, n=2, k=1, h=80, dtype="bfloat16",
         soft_cap=4.0, kv_lengths=(33, 20)),
]


@pytest.mark.parametrize("case, pattern", [
    (BIAS_CASES[0], "heads"), (BIAS_CASES[1], "keys"), (BIAS_CASES[1], "full"),
    (BIAS_CASES[0], "3d")], ids=str)
def test_bias_and_dbias_match_reference(case: Case, pattern: str):
  _check_vjp(case, {}, _bias(case, pattern))


def test_dbias_of_other_broadcast_patterns():
  # [B, 1, T, S] sums dS over heads; a bias constant along keys has dbias = 0.
  case = Case("patterns", t=33, s=33, n=4, k=2, h=40, causal=True, segments=True)
  _check_vjp(case, {}, _bias(case, "batch_plane"))
  q, k, v, kw = case.inputs()
  bias = _bias(case, "queries")
  dbias = jax.grad(lambda bias: pf.flash_attention(
      q, k, v, bias=bias, implementation=IMPL, **kw).sum())(bias)
  ref = jax.grad(lambda bias: pf.flash_attention(
      q, k, v, bias=bias, implementation="xla", **kw).sum())(bias)
  np.testing.assert_array_equal(dbias, 0.0)
  np.testing.assert_allclose(ref, 0.0, atol=1e-5)


def test_minus_inf_bias_masks_like_the_reference():
  case = Case("neg_inf", t=17, s=33, h=40)
  bias = _bias(case, "keys").at[0, :, :, 5:].set(-jnp.inf)
  bias = bias.at[1].set(-jnp.inf)  # batch row 1: every logit masked
  out, (_, _, _, dbias) = _check_vjp(case, {}, bias)
  np.testing.assert_array_equal(out[1], 0.0)
  np.testing.assert_array_equal(dbias[1], 0.0)


def test_dbias_only_when_the_bias_needs_a_gradient(monkeypatch):
  """The backward kernels get ``bias_grad`` only for a perturbed bias (and
  return no dbias partial otherwise)."""
  from pallas_flash.triton import backward as triton_backward
  case = Case("skip", t=33, s=33, h=40, dtype="bfloat16")
  calls, dbias = bias_grad_calls(monkeypatch, triton_backward, case, IMPL,
                                 _bias(case, "heads"))
  assert calls == [(True, 4), (False, 3), (False, 3)]
  np.testing.assert_array_equal(dbias, 0.0)


def _alibi_bias(slopes, case: Case, q_len, kv_len):
  """The ALiBi bias materialised from its definition, [B | 1, N, T, S]."""
  spec = masks.MaskSpec(bottom_right=case.bottom_right)
  offset = masks.diagonal_offset(spec, q_len, kv_len)[:, None, None, None]
  i = jnp.arange(case.seqlen)[:, None]
  j = jnp.arange(case.kv_len)[None, :]
  return -slopes.reshape(-1, case.heads)[:, :, None, None] * jnp.abs(i + offset - j)


@pytest.mark.parametrize("batched", [False, True])
def test_alibi_matches_materialised_bias(batched):
  case = Case("alibi", t=33, s=47, n=4, k=2, h=40, causal=True, bottom_right=True,
              q_lengths=(33, 20), kv_lengths=(47, 40))
  q, k, v, kw = case.inputs()
  slopes = 2.0 ** -jnp.arange(1, 5, dtype=jnp.float32)
  if batched:
    slopes = jnp.stack([slopes, slopes[::-1]])
  bias = _alibi_bias(slopes, case, kw["query_seq_lengths"], kw["key_value_seq_lengths"])
  d_out = jax.random.normal(jax.random.key(5), q.shape)
  f = lambda impl, **extra: jax.vjp(lambda q, k, v: pf.flash_attention(
      q, k, v, implementation=impl, **kw, **extra), q, k, v)
  out, vjp = f(IMPL, alibi_slopes=slopes)
  ref, ref_vjp = f("xla", bias=bias)
  xla, xla_vjp = f("xla", alibi_slopes=slopes)
  assert rel_err(out, ref) <= TOL["float32"]["out"]
  assert rel_err(xla, ref) <= TOL["float32"]["out"]
  for g, r in zip(vjp(d_out), ref_vjp(d_out)):
    assert rel_err(g, r) <= TOL["float32"]["grad"]


def test_alibi_linear_on_either_side_of_the_diagonal():
  """masks.alibi_linear's per-row + per-column parts equal alibi_bias on
  every block that masks.alibi_side puts on one side of the diagonal, for
  any key origin and either sign of the slope; straddling blocks get 0."""
  rng = np.random.default_rng(0)
  seen = set()
  for it in range(96):  # four block shapes: each jnp op compiles once per shape
    q0, k0 = rng.integers(0, 300, 2)
    nq, nk = ((1, 64), (64, 128), (64, 1), (7, 5))[it % 4]
    offset, origin = rng.integers(-100, 100), rng.integers(-50, 400)
    slope = rng.choice([0.5, -0.25, 2.0 ** -8])
    i, j = np.arange(q0, q0 + nq), np.arange(k0, k0 + nk)
    side = int(masks.alibi_side(q0, q0 + nq - 1, k0, k0 + nk - 1, offset))
    seen.add(side)
    row, col = masks.alibi_terms(slope, i, j, offset, origin)
    q_part, k_part = masks.alibi_linear(side, row, col)
    linear = np.asarray(q_part)[:, None] + np.asarray(k_part)[None, :]
    d = i[:, None] + offset - j[None, :]
    assert side == (1 if d.min() >= 0 else -1 if d.max() <= 0 else 0)
    if side == 0:
      np.testing.assert_array_equal(linear, 0.0)
    else:
      exact = masks.alibi_bias(slope, i[:, None], j[None, :], offset)
      np.testing.assert_allclose(linear, exact, rtol=1e-6, atol=1e-3)
      with_origin = masks.alibi_from_terms(
          slope, np.asarray(row)[:, None], np.asarray(col)[None, :])
      np.testing.assert_allclose(with_origin, exact, rtol=1e-6, atol=1e-3)
  assert seen == {-1, 0, 1}


# ---------------------------------------------------------------- dropout


def _attention_with_keep(q, k, v, keep, rate, kw):
  """Plain-jnp attention (through jax.nn's weights) with a given keep mask."""
  b, t, n, h = q.shape
  s = jnp.einsum("btnh,bsnh->bnts", q, jnp.repeat(k, n // k.shape[2], 2),
                 precision="highest") / np.sqrt(h)
  if kw.get("is_causal"):
    s = jnp.where(jnp.tril(jnp.ones((t, k.shape[1]), bool)), s, -jnp.inf)
  p = jax.nn.softmax(s, axis=-1) * keep / (1.0 - rate)
  return jnp.einsum("bnts,bsnh->btnh", p, jnp.repeat(v, n // v.shape[2], 2),
                    precision="highest")


def test_dropout_exact_against_helper_mask_and_deterministic():
  case = Case("dropout", t=33, s=47, n=4, k=2, h=40, causal=True)
  q, k, v, kw = case.inputs()
  rng, rate = jax.random.key(42), 0.25
  keep = pf.dropout_mask(rng, (case.batch, case.heads, case.seqlen, case.kv_len), rate)
  drop = dict(dropout_rate=rate, dropout_rng=rng)
  d_out = jax.random.normal(jax.random.key(5), q.shape)
  grads = jax.jit(lambda q, k, v, d_out: jax.vjp(lambda q, k, v: pf.flash_attention(
      q, k, v, implementation=IMPL, **kw, **drop), q, k, v)[1](d_out))
  out = pf.flash_attention(q, k, v, implementation=IMPL, **kw, **drop)
  ref, ref_vjp = jax.vjp(lambda q, k, v: _attention_with_keep(q, k, v, keep, rate, kw),
                         q, k, v)
  xla = pf.flash_attention(q, k, v, implementation="xla", **kw, **drop)
  assert rel_err(out, ref) <= TOL["float32"]["out"]
  assert rel_err(xla, ref) <= TOL["float32"]["out"]
  first = grads(q, k, v, d_out)
  for g, r in zip(first, ref_vjp(d_out)):
    assert rel_err(g, r) <= TOL["float32"]["grad"]
  for a, b in zip(first, grads(q, k, v, d_out)):  # run to run: the same bits
    np.testing.assert_array_equal(a, b)


def test_dropout_with_bias_alibi_and_soft_cap_gradients():
  case = Case("all", t=33, s=33, n=2, k=1, h=64, dtype="bfloat16", soft_cap=5.0,
              window=(9, 4))
  _check_vjp(case, dict(dropout_rate=0.1, dropout_rng=jax.random.key(1),
                        alibi_slopes=jnp.array([0.5, 0.125], jnp.float32)),
             _bias(case, "heads"))


def test_dropout_keep_rate_within_statistical_bounds():
  """The tests of ``dropout.py``'s docstring on a smaller mask, 5 sigma."""
  for rate in (0.1, 0.5, 0.9):
    keep = np.asarray(pf.dropout_mask(jax.random.key(3), (2, 4, 256, 512), rate))
    n, p = keep.size, 1 - rate
    var = rate * (1 - rate)
    assert abs(keep.mean() - p) < 5 * np.sqrt(var / n), (rate, keep.mean())
    # Per-row and per-column keep rates binomial: mean z^2 = 1 +- sqrt(2 / m).
    for axis, width in ((-1, keep.shape[-1]), (-2, keep.shape[-2])):
      z2 = np.square(keep.mean(axis) - p) / (var / width)
      assert abs(z2.mean() - 1) < 5 * np.sqrt(2 / z2.size), (rate, axis, z2.mean())
    # Neighbouring rows / columns / diagonal / heads are uncorrelated, and so
    # are the two rows (i, i + 8) of a pair (two halves of one word) and the
    # four corners of 1 x 1, 7 x 7 and 8 x 8 rectangles, the one dependency
    # the words leave (normalised, 1 / sqrt(n) each).
    x = (keep.astype(np.float64) - p) / np.sqrt(var)
    first = np.flatnonzero((np.arange(256) >> 3) % 2 == 0)  # rows i of pairs
    for a, b in ((x[:, :, 1:], x[:, :, :-1]), (x[..., 1:], x[..., :-1]),
                 (x[:, :, 1:, 1:], x[:, :, :-1, :-1]), (x[:, 1:], x[:, :-1]),
                 (x[:, :, first], x[:, :, first + 8])):
      assert abs(np.mean(a * b)) < 5 / np.sqrt(a.size), (rate, np.mean(a * b))
    for d in (1, 7, 8):
      corners = (x[..., d:, d:] * x[..., :-d, :-d] * x[..., d:, :-d]
                 * x[..., :-d, d:])
      assert abs(corners.mean()) < 5 / np.sqrt(corners.size), (rate, d, corners.mean())
  np.testing.assert_array_equal(pf.dropout_mask(jax.random.key(3), (1, 1, 4, 4), 0.0), True)


def test_dropout_threshold_counts_half_patterns():
  """``dropout.threshold``: exactly round(min(rate, 1 - rate) * 2^16) of the
  65536 half patterns compare below t (NaN patterns never do), so P(keep)
  is within 2^-16 of 1 - rate over the whole of [0, 1); rates r and 1 - r
  draw complementary masks from one key."""
  from pallas_flash import dropout
  halves = np.arange(65536, dtype=np.uint16).view(np.float16)
  for rate in (0.0, 1e-3, 0.1, 0.25, 0.4844, 0.5, 0.51, 0.9, 0.999):
    t, keep_below = dropout.threshold(rate)
    below = int(np.sum(halves < np.uint16(t).view(np.float16)))
    kept = below if keep_below else 65536 - below
    assert abs(kept / 65536 - (1 - rate)) <= 1.01 / 65536, (rate, kept)
  rng, shape = jax.random.key(4), (1, 2, 24, 40)
  np.testing.assert_array_equal(pf.dropout_mask(rng, shape, 0.1),
                                ~pf.dropout_mask(rng, shape, 0.9))


def _kernel_keep_mask(impl, rng, rate, b, n, t, s, config=None, broadcast=False):
  """The keep mask a backend applied, read back through its output: with
  q = 0 every probability is 1 / S and V = I (H = S) puts column j of P
  into output feature j, so out * S * (1 - rate) is the keep mask."""
  q = jnp.zeros((b, t, n, s), jnp.float32)
  v = jnp.broadcast_to(jnp.eye(s, dtype=jnp.float32)[None, :, None, :], (b, s, 1, s))
  out = pf.flash_attention(q, v, v, dropout_rate=rate, dropout_rng=rng,
                           broadcast_dropout=broadcast, implementation=impl,
                           config=config)
  scaled = np.asarray(out) * s * (1.0 - rate)  # [B, T, N, S]
  np.testing.assert_allclose(scaled, np.round(scaled), atol=1e-4)
  return np.transpose(np.round(scaled), (0, 2, 1, 3)).astype(bool)


def test_dropout_bits_identical_across_runs_tiles_and_backends():
  rng, rate, shape = jax.random.key(9), 0.3, (2, 2, 37, 48)
  helper = np.asarray(pf.dropout_mask(rng, shape, rate))
  small = pf.TritonConfig(block_q=16, block_k=16)
  for impl, config in (("xla", None), (IMPL, None), (IMPL, None), (IMPL, small)):
    np.testing.assert_array_equal(_kernel_keep_mask(impl, rng, rate, *shape, config), helper)
  other = pf.dropout_mask(jax.random.key(10), shape, rate)
  assert np.mean(np.asarray(other) != helper) > 0.3
  # broadcast_dropout: one [T, S] mask for every batch row and head.
  shared = np.asarray(pf.dropout_mask(rng, shape, rate, broadcast=True))
  assert (shared == shared[:1, :1]).all() and not (shared == helper).all()
  np.testing.assert_array_equal(
      _kernel_keep_mask(IMPL, rng, rate, *shape, broadcast=True), shared)


def test_triton_kernels_lower_for_cuda(monkeypatch):
  """The Pallas -> Triton lowering, which interpret mode skips (it rejected
  a float16 bitcast of a literal only on the GPU), without a GPU: bias with
  dbias, ALiBi and dropout, forward and backward, for sm_90."""
  import types
  from jax._src.pallas.triton import pallas_call_registration as registration
  from pallas_flash import _dispatch
  monkeypatch.setattr(registration, "gpu_info_lib", types.SimpleNamespace(
      get_gpu_info=lambda: types.SimpleNamespace(compute_capability="9.0")))
  monkeypatch.setattr(_dispatch, "on_gpu", lambda: True)
  q = jax.ShapeDtypeStruct((2, 100, 4, 64), jnp.bfloat16)
  kv = jax.ShapeDtypeStruct((2, 100, 2, 64), jnp.bfloat16)
  bias = jax.ShapeDtypeStruct((1, 4, 100, 100), jnp.bfloat16)
  loss = lambda q, k, v, bias: pf.flash_attention(
      q, k, v, bias=bias, is_causal=True, dropout_rate=0.1,
      dropout_rng=jax.random.key(0), alibi_slopes=jnp.ones((4,), jnp.float32),
      implementation=IMPL).astype(jnp.float32).sum()
  text = jax.jit(jax.grad(loss, (0, 1, 2, 3))).trace(q, kv, kv, bias).lower(
      lowering_platforms=("cuda",)).as_text()
  for kernel in ("pallas_flash_fwd", "pallas_flash_bwd_dkdv",
                 "pallas_flash_bwd_dq"):
    assert kernel in text, kernel


# ------------------------------------------------------- dispatch, sharding


def test_default_implementation_takes_every_feature():
  """``implementation=None``: XLA on a CPU; on a GPU the kernels (Mosaic
  takes ALiBi, dropout and a float16 / bfloat16 bias with full T and S dims
  in the forward, tests/test_mosaic.py; the Triton kernels the rest, and
  dbias)."""
  case = Case("default", t=33, s=33, n=2, k=2, h=64, dtype="bfloat16", causal=True)
  kw = dict(dropout_rate=0.1, dropout_rng=jax.random.key(2),
            alibi_slopes=jnp.array([0.25, 0.5], jnp.float32))
  out, _ = _check_vjp(case, kw, _bias(case, "heads"), impl=None)
  triton = pf.flash_attention(*case.inputs()[:3], bias=_bias(case, "heads"),
                              implementation=IMPL, is_causal=True, **kw)
  assert rel_err(out, triton) <= TOL["bfloat16"]["out"]
  for extra in (dict(bias=_bias(case, "keys")), dict(bias=_bias(case, "queries"), **kw)):
    with pytest.raises(NotImplementedError, match="mosaic"):
      pf.flash_attention(*case.inputs()[:3], implementation="mosaic", **extra)


@pytest.mark.skipif(len(jax.devices()) < 4, reason="needs 4 devices (4 host devices on CPU)")
def test_batch_sharded_bias_dbias_and_dropout_equal_unsharded():
  case = Case("sharded", b=4, t=33, s=33, n=2, k=2, h=32)
  q, k, v, _ = case.inputs()
  bias = _bias(case, "heads")  # replicated; its dbias sums over the shards
  mesh = jax.make_mesh((4,), ("x",), axis_types=(jax.sharding.AxisType.Auto,),
                       devices=jax.devices()[:4])
  put = lambda x, spec: jax.device_put(x, NamedSharding(mesh, spec))

  def loss(q, k, v, bias):
    out = pf.flash_attention(q, k, v, bias=bias, implementation=IMPL,
                             dropout_rate=0.2, dropout_rng=jax.random.key(4))
    return jnp.sum(out * jnp.cos(out))

  grad = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3)))
  sharded = grad(*(put(x, P("x")) for x in (q, k, v)), put(bias, P()))
  plain = grad(q, k, v, bias)
  for a, b in zip(jax.tree.leaves(sharded), jax.tree.leaves(plain)):
    np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)


# ------------------------------------------------------------- validation


def _bad(**kw):
  q = jnp.zeros((2, 8, 4, 16))
  kv = jnp.zeros((2, 9, 2, 16))
  return dict(query=q, key=kv, value=kv) | kw


@pytest.mark.parametrize("args, match", [
    (_bad(bias=jnp.ones((2, 4, 8, 9), jnp.int32)), "bias must be a float array"),
    (_bad(bias=jnp.ones((2, 4, 8, 5))), "bias of shape"),
    (_bad(alibi_slopes=jnp.ones((2,), jnp.float32)), "alibi_slopes must be"),
    (_bad(alibi_slopes=jnp.ones((3, 4), jnp.float32)), "alibi_slopes must be"),
    (_bad(alibi_slopes=jnp.ones((4,), jnp.float16)), "alibi_slopes must be"),
    (_bad(dropout_rate=1.0, dropout_rng=jax.random.key(0)), "dropout_rate=1.0"),
    (_bad(dropout_rate=-0.1, dropout_rng=jax.random.key(0)), "dropout_rate=-0.1"),
    (_bad(dropout_rate="0.1", dropout_rng=jax.random.key(0)), "dropout_rate='0.1'"),
    (_bad(dropout_rate=0.1), "dropout_rng is required"),
    (_bad(dropout_rate=0.1, dropout_rng=jnp.zeros((3,), jnp.int32)), "dropout_rng must be"),
])
def test_bad_input_raises_value_error(args, match):
  with pytest.raises(ValueError, match=match):
    pf.flash_attention(**args)


def test_dropout_mask_validates():
  with pytest.raises(ValueError, match="rate=1.5"):
    pf.dropout_mask(jax.random.key(0), (1, 1, 2, 2), 1.5)
  with pytest.raises(ValueError, match="shape="):
    pf.dropout_mask(jax.random.key(0), (2, 2), 0.1)


# ------------------------------------------------------------ GPU sizes

SLOW = [
    Case("slow_bf16_h128_causal", b=2, t=1025, s=1025, n=4, k=2, h=128, dtype="bfloat16", causal=True),
    Case("slow_fp16_h64", b=1, t=700, s=1300, n=4, k=4, h=64, dtype="float16"),
]


@pytest.mark.slow
@pytest.mark.parametrize("pattern", ["heads", "keys", "full"])
@pytest.mark.parametrize("case", SLOW, ids=str)
def test_large_bias_alibi_dropout(case: Case, pattern: str):
  _check_vjp(case, dict(dropout_rate=0.1, dropout_rng=jax.random.key(3),
                        alibi_slopes=2.0 ** -jnp.arange(1, case.heads + 1, dtype=jnp.float32)),
             _bias(case, pattern))


@pytest.mark.slow
def test_large_dropout_bits_match_helper():
  rng, shape = jax.random.key(5), (1, 2, 700, 256)
  np.testing.assert_array_equal(_kernel_keep_mask(IMPL, rng, 0.1, *shape),
                                np.asarray(pf.dropout_mask(rng, shape, 0.1)))
