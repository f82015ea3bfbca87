"""pallas_flash inside Flax: outputs and parameter gradients against Flax's own
attention in the same modules (float32, tolerance 1e-5).

Without a GPU everything runs through ``implementation=None``, i.e. the float32
reference; on a GPU the same tests run the kernels (tolerance 1e-4: the
kernels' float32 dots are exact but sum in another order).  The ``*_triton``
tests force the Pallas-Triton kernels (interpret mode on CPU, tiny sizes).

Fully masked query rows: pallas_flash outputs zeros there, Flax averages V.
Tests with padding therefore weight padded query rows by 0 in the loss and
compare only real rows.
"""
from __future__ import annotations

import functools
import math

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest
from flax import nnx

import pallas_flash
import pallas_flash.flax as pf
from pallas_flash.flax import linen as pf_linen
from pallas_flash.flax import nnx as pf_nnx

ON_GPU = jax.default_backend() == "gpu"
# The kernels' float32 dots are exact (no TF32) but sum in another order.
TOL = dict(atol=1e-4, rtol=1e-4) if ON_GPU else dict(atol=1e-5, rtol=1e-5)
B, T, S, F, HEADS = 2, 11, 7, 16, 4


@pytest.fixture(autouse=True)
def _exact_float32_matmuls():
  """Flax's own attention and the projections in true float32 (on a GPU the
  default would be TF32), so that the comparison measures pallas_flash."""
  with jax.default_matmul_precision("float32"):
    yield


def _inputs(*shape, seed=0):
  return jax.random.normal(jax.random.key(seed), shape, jnp.float32)


def _valid(lengths, length):
  """[B, length] bool, True for the first lengths[b] tokens (right padding)."""
  return jnp.arange(length)[None, :] < jnp.asarray(lengths)[:, None]


def _weighted_loss(out, row_weight=None):
  """A random-cotangent loss; row_weight [batch..., T] zeroes padded rows."""
  cot = jax.random.normal(jax.random.key(42), out.shape, out.dtype)
  if row_weight is not None:
    cot = cot * row_weight[..., None]
  return jnp.sum(out * cot)


def _assert_same(out_a, out_b, grads_a, grads_b, row_weight=None):
  if row_weight is not None:
    out_a = out_a * row_weight[..., None]
    out_b = out_b * row_weight[..., None]
  chex.assert_trees_all_close(out_a, out_b, **TOL)
  chex.assert_trees_all_close(grads_a, grads_b, **TOL)


def _linen_value_and_grad(module, params, *args, row_weight=None, **kwargs):
  def loss(p):
    out = module.apply(p, *args, **kwargs)
    return _weighted_loss(out, row_weight), out
  (_, out), grads = jax.value_and_grad(loss, has_aux=True)(params)
  return out, grads


# --------------------------------------------------------------------------
# attention_fn inside flax.linen.MultiHeadDotProductAttention
# --------------------------------------------------------------------------

def _linen_pair(attention_fn, **kwargs):
  ours = nn.MultiHeadDotProductAttention(attention_fn=attention_fn, **kwargs)
  theirs = nn.MultiHeadDotProductAttention(**kwargs)
  return ours, theirs


LINEN_CASES = {
    "causal": dict(q=(B, T, F), kv=None, mask="causal"),
    "padding": dict(q=(B, T, F), kv=None, mask="padding"),
    "cross": dict(q=(B, T, F), kv=(B, S, F), mask="kv_padding"),
    "cross_no_mask": dict(q=(B, T, F), kv=(B, S, F), mask=None),
    "extra_batch_dims": dict(q=(2, 3, T, F), kv=None, mask="causal"),
}


def _flax_mask(case, q_shape, kv_shape):
  """(mask, row_weight) in Flax's convention for a LINEN_CASES mask name."""
  t = q_shape[-2]
  s = t if kv_shape is None else kv_shape[-2]
  batch = q_shape[:-2]
  if case is None:
    return None, None
  if case == "causal":
    return nn.make_causal_mask(jnp.ones(batch + (t,))), None
  if case == "padding":
    valid = _valid([t, t - 4], t)
    return nn.make_attention_mask(valid, valid), valid.astype(jnp.float32)
  if case == "kv_padding":
    kv_valid = _valid([s, 3], s)
    return nn.make_attention_mask(jnp.ones(batch + (t,), bool), kv_valid), None
  raise ValueError(case)


@pytest.mark.parametrize("name", list(LINEN_CASES))
def test_linen_attention_fn_matches_flax(name):
  case = LINEN_CASES[name]
  xq = _inputs(*case["q"])
  xkv = None if case["kv"] is None else _inputs(*case["kv"], seed=1)
  mask, row_weight = _flax_mask(case["mask"], case["q"], case["kv"])
  ours, theirs = _linen_pair(pf.attention_fn, num_heads=HEADS, qkv_features=16)
  params = theirs.init(jax.random.key(0), xq, xkv)
  out_a, g_a = _linen_value_and_grad(ours, params, xq, xkv, mask=mask,
                                     row_weight=row_weight)
  out_b, g_b = _linen_value_and_grad(theirs, params, xq, xkv, mask=mask,
                                     row_weight=row_weight)
  _assert_same(out_a, out_b, g_a, g_b, row_weight)


def test_linen_make_attention_fn_causal_without_mask():
  """make_attention_fn(is_causal=True) == Flax with make_causal_mask."""
  x = _inputs(B, T, F)
  ours, theirs = _linen_pair(pf.make_attention_fn(is_causal=True),
                             num_heads=HEADS)
  params = theirs.init(jax.random.key(0), x)
  out_a, g_a = _linen_value_and_grad(ours, params, x)
  out_b, g_b = _linen_value_and_grad(theirs, params, x,
                                     mask=nn.make_causal_mask(x[..., 0]))
  _assert_same(out_a, out_b, g_a, g_b)


def test_linen_attention_fn_under_jit_bf16():
  """dtype=bfloat16 projections: promoted and computed like Flax (loose tol)."""
  x = _inputs(B, T, F)
  ours, theirs = _linen_pair(pf.attention_fn, num_heads=HEADS,
                             dtype=jnp.bfloat16)
  params = theirs.init(jax.random.key(0), x)
  mask = nn.make_causal_mask(x[..., 0])
  out_a = jax.jit(ours.apply)(params, x, mask=mask)
  out_b = jax.jit(theirs.apply)(params, x, mask=mask)
  assert out_a.dtype == out_b.dtype == jnp.bfloat16
  chex.assert_trees_all_close(out_a.astype(jnp.float32),
                              out_b.astype(jnp.float32), atol=5e-2, rtol=5e-2)


# --------------------------------------------------------------------------
# attention_fn inside flax.nnx.MultiHeadAttention
# --------------------------------------------------------------------------

def _nnx_value_and_grad(model, *args, row_weight=None, **kwargs):
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)

  def loss(p):
    out = nnx.merge(graphdef, p, rest)(*args, **kwargs)
    return _weighted_loss(out, row_weight), out
  (_, out), grads = jax.value_and_grad(loss, has_aux=True)(params)
  return out, grads


def _nnx_pair(**kwargs):
  ours = nnx.MultiHeadAttention(attention_fn=pf.attention_fn,
                                rngs=nnx.Rngs(0), **kwargs)
  theirs = nnx.MultiHeadAttention(rngs=nnx.Rngs(0), **kwargs)
  return ours, theirs


@pytest.mark.parametrize("num_kv_heads", [None, 2, 1])
@pytest.mark.parametrize("name", ["causal", "padding", "cross"])
def test_nnx_attention_fn_matches_flax(name, num_kv_heads):
  xq = _inputs(B, T, F)
  ours, theirs = _nnx_pair(num_heads=HEADS, in_features=F, decode=False,
                           num_kv_heads=num_kv_heads)
  kwargs, row_weight, args = {}, None, (xq,)
  if name == "causal":
    kwargs["is_causal"] = True  # nnx passes it on: no [T, S] mask here
  elif name == "padding":
    valid = _valid([T, T - 4], T)
    kwargs["mask"] = nnx.make_attention_mask(valid, valid)
    row_weight = valid.astype(jnp.float32)
  else:
    args = (xq, _inputs(B, S, F, seed=1))
    kwargs["mask"] = nnx.make_attention_mask(jnp.ones((B, T), bool),
                                             _valid([S, 2], S))
  out_a, g_a = _nnx_value_and_grad(ours, *args, row_weight=row_weight, **kwargs)
  out_b, g_b = _nnx_value_and_grad(theirs, *args, row_weight=row_weight,
                                   **kwargs)
  _assert_same(out_a, out_b, g_a, g_b, row_weight)


# --------------------------------------------------------------------------
# The linen layer (no N x N mask) against Flax's MultiHeadDotProductAttention
# --------------------------------------------------------------------------

def _layer_vs_flax(layer_kwargs, flax_mask, xq, xkv=None, row_weight=None,
                   jit=False, **layer_cfg):
  ours = pf_linen.MultiHeadAttention(num_heads=HEADS, **layer_cfg)
  theirs = nn.MultiHeadDotProductAttention(num_heads=HEADS)
  params = theirs.init(jax.random.key(0), xq, xkv)
  is_causal = layer_kwargs.pop("is_causal", False)  # static, not traced
  apply_ours = functools.partial(ours.apply, is_causal=is_causal)
  if jit:
    apply_ours = jax.jit(apply_ours)

  def loss_a(p):
    out = apply_ours(p, xq, xkv, **layer_kwargs)
    return _weighted_loss(out, row_weight), out

  (_, out_a), g_a = jax.value_and_grad(loss_a, has_aux=True)(params)
  out_b, g_b = _linen_value_and_grad(theirs, params, xq, xkv, mask=flax_mask,
                                     row_weight=row_weight)
  _assert_same(out_a, out_b, g_a, g_b, row_weight)


def test_linen_layer_params_match_flax_layout():
  x = _inputs(B, T, F)
  ours = pf_linen.MultiHeadAttention(num_heads=HEADS)
  theirs = nn.MultiHeadDotProductAttention(num_heads=HEADS)
  shapes = lambda m: jax.tree.map(jnp.shape, m.init(jax.random.key(0), x))
  assert shapes(ours) == shapes(theirs)
  chex.assert_trees_all_close(ours.init(jax.random.key(3), x),
                              theirs.init(jax.random.key(3), x))


def test_linen_layer_causal():
  x = _inputs(B, T, F)
  _layer_vs_flax(dict(is_causal=True), nn.make_causal_mask(x[..., 0]), x)


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("how", ["padding_mask", "seq_lengths"])
@pytest.mark.parametrize("is_causal", [False, True])
def test_linen_layer_right_padding(is_causal, how, jit):
  x = _inputs(B, T, F)
  lengths = jnp.array([T - 3, 5])
  valid = _valid(lengths, T)
  flax_mask = nn.make_attention_mask(valid, valid)
  if is_causal:
    flax_mask = nn.combine_masks(nn.make_causal_mask(x[..., 0]), flax_mask)
  padding = dict(padding_mask=valid) if how == "padding_mask" else dict(
      seq_lengths=lengths)
  _layer_vs_flax(dict(is_causal=is_causal, **padding), flax_mask, x,
                 row_weight=valid.astype(jnp.float32), jit=jit)


@pytest.mark.parametrize("jit", [False, True])
def test_linen_layer_left_padding_uses_segments(jit):
  """Padding that is not a suffix (left padding, a hole): segment ids path."""
  x = _inputs(B, T, F)
  valid = jnp.stack([jnp.arange(T) >= 4,                       # left padding
                     (jnp.arange(T) < 3) | (jnp.arange(T) >= 6)])  # a hole
  flax_mask = nn.make_attention_mask(valid, valid)
  _layer_vs_flax(dict(padding_mask=valid), flax_mask, x,
                 row_weight=valid.astype(jnp.float32), jit=jit)


def test_linen_layer_cross_attention_kv_padding():
  xq, xkv = _inputs(B, T, F), _inputs(B, S, F, seed=1)
  kv_valid = _valid([S, 3], S)
  flax_mask = nn.make_attention_mask(jnp.ones((B, T), bool), kv_valid)
  _layer_vs_flax(dict(kv_padding_mask=kv_valid), flax_mask, xq, xkv)
  _layer_vs_flax(dict(kv_seq_lengths=jnp.array([S, 3])), flax_mask, xq, xkv)


def test_linen_layer_packed_segments_causal():
  x = _inputs(B, T, F)
  seg = jnp.array([[0] * 4 + [1] * 5 + [2] * 2,
                   [0] * 6 + [1] * 3 + [-1] * 2])   # -1: padding at the end
  valid = seg >= 0
  flax_mask = nn.combine_masks(
      nn.make_causal_mask(x[..., 0]),
      nn.make_attention_mask(seg, seg, jnp.equal),
      nn.make_attention_mask(valid, valid))
  _layer_vs_flax(dict(is_causal=True, segment_ids=seg), flax_mask, x,
                 row_weight=valid.astype(jnp.float32))
  # The same padding given as a mask on top of non-negative ids.
  _layer_vs_flax(dict(is_causal=True, segment_ids=jnp.maximum(seg, 0),
                      padding_mask=valid), flax_mask, x,
                 row_weight=valid.astype(jnp.float32))


def test_linen_layer_extra_batch_dims():
  x = _inputs(2, 3, T, F)
  lengths = jnp.array([[T, 4, 9], [1, T, 6]])
  valid = _valid(lengths.reshape(-1), T).reshape(2, 3, T)
  flax_mask = nn.combine_masks(nn.make_causal_mask(x[..., 0]),
                               nn.make_attention_mask(valid, valid))
  _layer_vs_flax(dict(is_causal=True, seq_lengths=lengths), flax_mask, x,
                 row_weight=valid.astype(jnp.float32))


class _FlaxGQA(nn.Module):
  """Flax's own GQA attention (nnx.dot_product_attention) with the layer's
  parameter names, to check the layer's num_kv_heads path."""

  num_heads: int
  num_kv_heads: int

  @nn.compact
  def __call__(self, x, mask):
    h = x.shape[-1] // self.num_heads
    q = nn.DenseGeneral((self.num_heads, h), name="query")(x)
    k = nn.DenseGeneral((self.num_kv_heads, h), name="key")(x)
    v = nn.DenseGeneral((self.num_kv_heads, h), name="value")(x)
    y = nnx.dot_product_attention(q, k, v, mask=mask)
    return nn.DenseGeneral(x.shape[-1], axis=(-2, -1), name="out")(y)


@pytest.mark.parametrize("num_kv_heads", [2, 1])
def test_linen_layer_gqa(num_kv_heads):
  x = _inputs(B, T, F)
  ours = pf_linen.MultiHeadAttention(num_heads=HEADS, num_kv_heads=num_kv_heads)
  theirs = _FlaxGQA(num_heads=HEADS, num_kv_heads=num_kv_heads)
  params = ours.init(jax.random.key(0), x)
  out_a, g_a = _linen_value_and_grad(ours, params, x, is_causal=True)
  out_b, g_b = _linen_value_and_grad(theirs, params, x,
                                     nn.make_causal_mask(x[..., 0]))
  _assert_same(out_a, out_b, g_a, g_b)


# --------------------------------------------------------------------------
# The nnx layer against flax.nnx.MultiHeadAttention
# --------------------------------------------------------------------------

@pytest.mark.parametrize("num_kv_heads", [None, 2])
@pytest.mark.parametrize("name", ["causal_padding", "left_padding", "cross"])
def test_nnx_layer_matches_flax(name, num_kv_heads):
  kw = dict(num_heads=HEADS, in_features=F, num_kv_heads=num_kv_heads)
  ours = pf_nnx.MultiHeadAttention(rngs=nnx.Rngs(0), **kw)
  theirs = nnx.MultiHeadAttention(rngs=nnx.Rngs(0), decode=False, **kw)
  chex.assert_trees_all_equal(nnx.state(ours, nnx.Param),
                              nnx.state(theirs, nnx.Param))
  xq = _inputs(B, T, F)
  args, row_weight = (xq,), None
  if name == "causal_padding":
    valid = _valid([T - 2, 6], T)
    ours_kw = dict(is_causal=True, seq_lengths=jnp.array([T - 2, 6]))
    theirs_kw = dict(is_causal=True, mask=nnx.make_attention_mask(valid, valid))
    row_weight = valid.astype(jnp.float32)
  elif name == "left_padding":
    valid = jnp.stack([jnp.arange(T) >= 3, jnp.arange(T) >= 0])
    ours_kw = dict(padding_mask=valid)
    theirs_kw = dict(mask=nnx.make_attention_mask(valid, valid))
    row_weight = valid.astype(jnp.float32)
  else:
    args = (xq, _inputs(B, S, F, seed=1))
    kv_valid = _valid([S, 2], S)
    ours_kw = dict(kv_padding_mask=kv_valid)
    theirs_kw = dict(mask=nnx.make_attention_mask(jnp.ones((B, T), bool),
                                                  kv_valid))
  out_a, g_a = _nnx_value_and_grad(ours, *args, row_weight=row_weight, **ours_kw)
  out_b, g_b = _nnx_value_and_grad(theirs, *args, row_weight=row_weight,
                                   **theirs_kw)
  _assert_same(out_a, out_b, g_a, g_b, row_weight)


def test_nnx_layer_bad_heads():
  with pytest.raises(ValueError, match="num_heads=4 must be a multiple of "
                     "num_kv_heads=3"):
    pf_nnx.MultiHeadAttention(num_heads=4, in_features=F, num_kv_heads=3,
                              rngs=nnx.Rngs(0))


# --------------------------------------------------------------------------
# The Pallas-Triton kernels (interpret mode on CPU: tiny sizes)
# --------------------------------------------------------------------------

def test_linen_layer_triton():
  """GQA, causal, padding that is not a suffix (both lax.cond branches are
  compiled), through implementation="triton", against Flax's attention."""
  x = _inputs(B, T, F)
  valid = jnp.stack([jnp.arange(T) >= 4, jnp.arange(T) < 7])
  ours = pf_linen.MultiHeadAttention(num_heads=2, num_kv_heads=1,
                                     implementation="triton")
  theirs = _FlaxGQA(num_heads=2, num_kv_heads=1)
  params = ours.init(jax.random.key(0), x)
  mask = nn.combine_masks(nn.make_causal_mask(x[..., 0]),
                          nn.make_attention_mask(valid, valid))
  row_weight = valid.astype(jnp.float32)
  out_a, g_a = _linen_value_and_grad(ours, params, x, is_causal=True,
                                     padding_mask=valid, row_weight=row_weight)
  out_b, g_b = _linen_value_and_grad(theirs, params, x, mask,
                                     row_weight=row_weight)
  _assert_same(out_a, out_b, g_a, g_b, row_weight)


def test_linen_attention_fn_triton_dense_mask():
  """A Flax mask through the kernels' dense boolean mask path."""
  x = _inputs(B, T, F)
  ours, theirs = _linen_pair(pf.make_attention_fn(implementation="triton"),
                             num_heads=2)
  params = theirs.init(jax.random.key(0), x)
  mask = nn.make_causal_mask(x[..., 0])
  out_a, g_a = _linen_value_and_grad(ours, params, x, mask=mask)
  out_b, g_b = _linen_value_and_grad(theirs, params, x, mask=mask)
  _assert_same(out_a, out_b, g_a, g_b)


# --------------------------------------------------------------------------
# Errors: what cannot be honoured is refused, never dropped
# --------------------------------------------------------------------------

# --------------------------------------------------------------------------
# Attention dropout: Flax's semantics, pallas_flash's keep mask
# --------------------------------------------------------------------------

def _attention_with_helper_mask(query, key, value, bias=None, mask=None,
                                broadcast_dropout=True, dropout_rng=None,
                                dropout_rate=0.0, deterministic=False,
                                dtype=None, precision=None, module=None,
                                **unused):
  """Flax's dot_product_attention with pallas_flash.dropout_mask's bits."""
  del module, unused
  w = nn.dot_product_attention_weights(query, key, bias, mask, dtype=dtype,
                                       precision=precision, deterministic=True)
  if dropout_rate > 0.0 and not deterministic:
    *batch, n, t, s = w.shape
    keep = pallas_flash.dropout_mask(
        dropout_rng, (math.prod(batch), n, t, s), dropout_rate,
        broadcast=broadcast_dropout).reshape(w.shape)
    w = w * keep / (1.0 - dropout_rate)
  return jnp.einsum("...hqk,...khd->...qhd", w, value, precision=precision)


@pytest.mark.parametrize("broadcast_dropout", [True, False])
def test_linen_attention_fn_dropout(broadcast_dropout):
  x = _inputs(2, 3, T, F)  # extra batch dims
  kw = dict(num_heads=HEADS, dropout_rate=0.3, broadcast_dropout=broadcast_dropout)
  ours, theirs = _linen_pair(pf.attention_fn, **kw)
  ref = nn.MultiHeadDotProductAttention(attention_fn=_attention_with_helper_mask, **kw)
  params = theirs.init(jax.random.key(0), x, deterministic=True)
  rngs = {"dropout": jax.random.key(1)}
  got = _linen_value_and_grad(ours, params, x, deterministic=False, rngs=rngs)
  want = _linen_value_and_grad(ref, params, x, deterministic=False, rngs=rngs)
  _assert_same(got[0], want[0], got[1], want[1])
  dropped = ours.apply(params, x, deterministic=False, rngs=rngs)
  kept = ours.apply(params, x, deterministic=True)
  chex.assert_trees_all_close(kept, theirs.apply(params, x, deterministic=True), **TOL)
  assert not jnp.allclose(dropped, kept)


def test_nnx_attention_fn_dropout():
  make = lambda fn: nnx.MultiHeadAttention(
      num_heads=HEADS, in_features=F, attention_fn=fn, decode=False,
      dropout_rate=0.2, rngs=nnx.Rngs(0, dropout=7))
  x = _inputs(B, T, F)
  ours, ref = make(pf.attention_fn), make(_attention_with_helper_mask)
  chex.assert_trees_all_close(ours(x, deterministic=False), ref(x, deterministic=False), **TOL)
  chex.assert_trees_all_close(ours(x, deterministic=True), ref(x, deterministic=True), **TOL)


def test_layers_dropout():
  x = _inputs(B, T, F)
  rngs = {"dropout": jax.random.key(3)}
  ours = pf_linen.MultiHeadAttention(num_heads=HEADS, dropout_rate=0.25)
  ref = nn.MultiHeadDotProductAttention(
      num_heads=HEADS, dropout_rate=0.25, attention_fn=_attention_with_helper_mask)
  params = ref.init(jax.random.key(0), x, deterministic=True)
  got = _linen_value_and_grad(ours, params, x, deterministic=False, rngs=rngs)
  want = _linen_value_and_grad(ref, params, x, deterministic=False, rngs=rngs)
  _assert_same(got[0], want[0], got[1], want[1])
  with pytest.raises(ValueError, match="deterministic"):  # Flax's merge_param
    ours.apply(params, x, rngs=rngs)
  layer = pf_nnx.MultiHeadAttention(num_heads=HEADS, in_features=F, dropout_rate=0.25,
                                    rngs=nnx.Rngs(0, dropout=5))
  theirs = nnx.MultiHeadAttention(num_heads=HEADS, in_features=F, dropout_rate=0.25,
                                  decode=False, attention_fn=_attention_with_helper_mask,
                                  rngs=nnx.Rngs(0, dropout=5))
  chex.assert_trees_all_close(layer(x, deterministic=False), theirs(x, deterministic=False), **TOL)
  chex.assert_trees_all_close(layer(x, deterministic=True), theirs(x, deterministic=True), **TOL)


def test_sow_weights_is_refused():
  x = _inputs(B, T, F)
  layer = nn.MultiHeadDotProductAttention(num_heads=HEADS,
                                          attention_fn=pf.attention_fn)
  params = layer.init(jax.random.key(0), x)
  with pytest.raises(NotImplementedError, match="cannot be sown"):
    layer.apply(params, x, sow_weights=True, mutable=["intermediates"])
  nnx_layer = nnx.MultiHeadAttention(num_heads=HEADS, in_features=F,
                                     attention_fn=pf.attention_fn,
                                     decode=False, rngs=nnx.Rngs(0))
  with pytest.raises(NotImplementedError, match="cannot be sown"):
    nnx_layer(x, sow_weights=True)


def test_custom_einsum_is_refused():
  x = _inputs(B, T, F)
  layer = nn.MultiHeadDotProductAttention(
      num_heads=HEADS, attention_fn=pf.attention_fn,
      qk_attn_weights_einsum_cls=lambda: jnp.einsum,
      attn_weights_value_einsum_cls=lambda: jnp.einsum)
  with pytest.raises(NotImplementedError, match="custom attention einsums"):
    layer.init(jax.random.key(0), x)


def test_attention_fn_bad_mask_shape():
  q = _inputs(B, T, HEADS, 4)
  with pytest.raises(ValueError, match=r"mask of shape \(2, 1, 5, 11\) does "
                     "not broadcast"):
    pf.attention_fn(q, q, q, mask=jnp.ones((B, 1, 5, T), bool))
  with pytest.raises(ValueError, match="batch dims of query"):
    pf.attention_fn(q, q[:1], q[:1])


@pytest.mark.parametrize("kwargs, match", [
    (dict(padding_mask=jnp.ones((B, T), bool), seq_lengths=jnp.array([T, 3])),
     "query_padding_mask or query_seq_lengths, not both"),
    (dict(padding_mask=jnp.ones((B, T), jnp.int32)),
     "query_padding_mask must be boolean"),
    (dict(padding_mask=jnp.ones((B, T + 1), bool)),
     r"padding_mask must have shape \[batch..., ...\] = \[2, 11\]"),
    (dict(seq_lengths=jnp.array([T])), r"seq_lengths must have shape"),
])
def test_linen_layer_bad_padding(kwargs, match):
  x = _inputs(B, T, F)
  layer = pf_linen.MultiHeadAttention(num_heads=HEADS)
  params = layer.init(jax.random.key(0), x)
  with pytest.raises(ValueError, match=match):
    layer.apply(params, x, **kwargs)


def test_linen_layer_bad_heads():
  x = _inputs(B, T, F)
  with pytest.raises(ValueError, match="num_heads=4 must be a multiple of "
                     "num_kv_heads=3"):
    pf_linen.MultiHeadAttention(num_heads=4, num_kv_heads=3).init(
        jax.random.key(0), x)
  with pytest.raises(ValueError, match="qkv_features=16 must be a multiple of "
                     "num_heads=3"):
    pf_linen.MultiHeadAttention(num_heads=3).init(jax.random.key(0), x)


def test_deterministic_backward_reaches_flash_attention(monkeypatch):
  """``deterministic_backward`` (make_attention_fn, both layers) is
  flash_attention's ``deterministic``, apart from Flax's dropout flag."""
  seen = []
  real = pallas_flash.api.flash_attention

  def spy(*args, **kwargs):
    seen.append(kwargs["deterministic"])
    return real(*args, **kwargs)
  monkeypatch.setattr(pallas_flash.api, "flash_attention", spy)
  x = jnp.ones((1, 8, 16))
  q = jnp.ones((1, 8, 2, 8))
  for flag in (True, False):
    seen.clear()
    pf.make_attention_fn(deterministic_backward=flag)(q, q, q,
                                                      deterministic=True)
    layer = pf_linen.MultiHeadAttention(num_heads=2,
                                        deterministic_backward=flag)
    layer.apply(layer.init(jax.random.key(0), x), x, deterministic=True)
    pf_nnx.MultiHeadAttention(2, 16, deterministic_backward=flag,
                              rngs=nnx.Rngs(0))(x, deterministic=True)
    assert seen and all(s is flag for s in seen), (flag, seen)
  layer = pf_linen.MultiHeadAttention(num_heads=2)
  seen.clear()
  layer.apply(layer.init(jax.random.key(0), x), x)
  assert seen == [True, True]  # init and apply: the default stays True
