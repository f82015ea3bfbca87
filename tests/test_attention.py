"""The kernel path against the f32 reference (HIGHEST precision).

One matrix for every kernel backend (``IMPLS``).  On a CPU-only machine the
Pallas-Triton and Mosaic GPU kernels run in Pallas interpret mode; on a GPU the
very same tests run the compiled kernels (nothing here skips itself).  ``pytest -m 'slow or not slow'`` adds GPU-sized cases.
"""
from __future__ import annotations

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_flash as pf
from pallas_flash import masks
from cases import FORWARD, GRADIENT, TOL, Case, check_backward_takes_delta, check_forward, check_gradients, rel_err as _rel, upcast as _upcast

IMPL = "triton"


def _kernel_impls():
  """The kernel backends under test: Pallas-Triton everywhere, the Mosaic GPU
  forward on Hopper and on a CPU-only machine (both in Pallas interpret mode
  there); only a non-Hopper GPU, which cannot run Mosaic GPU, leaves it out."""
  impls = ["triton"]
  dev = jax.devices()[0]
  if dev.platform != "gpu" or str(getattr(dev, "compute_capability", "")).startswith("9"):
    impls.append("mosaic")
  return impls


IMPLS = _kernel_impls()


def _mosaic_refuses(impl: str, case: Case) -> bool:
  """Inputs the Mosaic forward rejects by design (NotImplementedError)."""
  return impl == "mosaic" and case.dtype == "float32"


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("case", FORWARD, ids=str)
def test_forward_matches_reference(case: Case, impl: str):
  q, k, v, kw = case.inputs()
  if _mosaic_refuses(impl, case):
    with pytest.raises(NotImplementedError):
      pf.flash_attention(q, k, v, implementation=impl, **kw)
    return
  check_forward(case, impl)


def _supported(cases):
  return [pytest.param(c, i, id=f"{c}-{i}") for c in cases for i in IMPLS
          if not _mosaic_refuses(i, c)]


@pytest.mark.parametrize("case, impl", _supported(GRADIENT))
def test_gradients_match_reference_vjp(case: Case, impl: str):
  check_gradients(case, impl)


@pytest.mark.parametrize("case", [Case("nn_plain", t=33, s=33), Case("nn_causal", t=17, s=33, causal=True),
                                  Case("nn_window_gqa", t=33, s=33, n=4, k=2, window=(3, 5)),
                                  Case("nn_kv_lengths", t=17, s=33, kv_lengths=(20, 33)),
                                  Case("nn_mask", t=17, s=17, dense_mask="full", soft_cap=None)],
                         ids=str)
def test_matches_jax_nn_dot_product_attention(case: Case):
  """Same arguments, same result as jax.nn (rows that see at least one key)."""
  q, k, v, kw = case.inputs()
  kw.pop("causal_alignment")
  if "mask" in kw:  # keep every row non-empty: jax.nn averages V over empty rows
    kw["mask"] = kw["mask"].at[..., 0].set(True)
  out, lse = pf.flash_attention(q, k, v, implementation=IMPL, return_residual=True, **kw)
  ref, ref_lse = jax.nn.dot_product_attention(q, k, v, implementation="xla",
                                              return_residual=True, **kw)
  np.testing.assert_allclose(out, ref, atol=1e-5, rtol=1e-5)
  np.testing.assert_allclose(lse, ref_lse, atol=1e-5, rtol=1e-5)


def test_fully_masked_rows_give_zeros_and_finite_lse_and_grads():
  case = Case("empty_rows", t=33, s=33, causal=True, bottom_right=True,
              q_lengths=(33, 20), kv_lengths=(3, 33))
  q, k, v, kw = case.inputs()
  kw["mask"] = jnp.ones((2, 1, 33, 33), bool).at[:, :, 5:9, :].set(False)
  out, lse = pf.flash_attention(q, k, v, implementation=IMPL, return_residual=True, **kw)
  # batch 0: kv_len 3 with bottom-right causal: rows < 30 see nothing.
  np.testing.assert_array_equal(out[0, :30], 0.0)
  np.testing.assert_array_equal(out[:, 5:9], 0.0)  # masked by the dense mask
  np.testing.assert_array_equal(out[1, 20:], 0.0)  # past q length
  np.testing.assert_array_equal(lse[0, :30], np.float32(masks.MASKED_LSE))
  assert np.all(np.abs(np.asarray(out[0, 30:])) > 0)
  grads = jax.grad(lambda q, k, v: jnp.sum(pf.flash_attention(q, k, v, implementation=IMPL, **kw) ** 2),
                   (0, 1, 2))(q, k, v)
  chex.assert_tree_all_finite(grads)
  np.testing.assert_array_equal(grads[0][:, 5:9], 0.0)


@pytest.mark.parametrize("impl", IMPLS)
def test_diagonal_shift_matches_reference(impl: str):
  """``MaskArrays.diagonal_shift`` (ring attention's per-batch-row diagonal
  of a block, pallas_flash/ring.py): each backend's forward and backward
  against the reference with the same arrays.  Causal top-left shifted by
  -40 (rows < 40 see nothing), 60 with ragged lengths, and 200 (every key)."""
  from pallas_flash import _vjp, reference
  from pallas_flash.params import KernelParams

  dtype = "bfloat16" if impl == "mosaic" else "float32"
  q, k, v, _ = Case("shift", b=3, t=97, s=130, n=2, k=1, h=40,
                    dtype=dtype).inputs()
  arrays = masks.MaskArrays(
      jnp.array([97, 50, 97], jnp.int32), jnp.array([130, 100, 70], jnp.int32),
      diagonal_shift=jnp.array([-40, 60, 200], jnp.int32))
  spec = masks.MaskSpec(is_causal=True)
  params = KernelParams(spec=spec, scale=40 ** -0.5, forward=impl,
                        backward=impl,
                        interpret=jax.default_backend() != "gpu")
  d_out = jax.random.normal(jax.random.key(7), q.shape, q.dtype)
  (out, lse), vjp = jax.vjp(
      lambda q, k, v: _vjp.flash(params, q, k, v, arrays), q, k, v)
  grads = vjp((d_out, jnp.zeros_like(lse)))
  (ref, ref_lse), ref_vjp = jax.vjp(
      lambda q, k, v: reference.attention(q, k, v, arrays, spec=spec,
                                          scale=params.scale,
                                          logits_soft_cap=None),
      *_upcast(q, k, v))
  ref_grads = ref_vjp((d_out.astype(jnp.float32), jnp.zeros_like(ref_lse)))
  tol = TOL[dtype]
  np.testing.assert_array_equal(out[0, :40], 0.0)  # fully masked rows
  assert _rel(out, ref) <= tol["out"], _rel(out, ref)
  lse = jnp.transpose(lse, (0, 2, 1))
  seen = ref_lse > masks.MASKED_LSE
  np.testing.assert_array_equal(jnp.isfinite(lse), seen)
  np.testing.assert_allclose(jnp.where(seen, lse, 0), jnp.where(seen, ref_lse, 0),
                             atol=tol["lse"], rtol=tol["lse"])
  for name, g, r in zip("qkv", grads, ref_grads):
    chex.assert_tree_all_finite(g)
    assert _rel(g, r) <= tol["grad"], (name, _rel(g, r))


def test_visible_span_is_the_mask_rules_by_query_and_by_key():
  """``masks.visible_span`` (per query row, and kv-major per key) and
  ``position_visible`` against the module docstring's rules written out,
  over causal / window / lengths / offsets, empty rows included."""
  i = np.arange(40)[:, None]
  j = np.arange(50)[None, :]
  for causal in (False, True):
    for window in (None, (3, 5), (0, 0), (7, 0)):
      spec = masks.MaskSpec(is_causal=causal, window=window)
      for q_len, kv_len, off in [(40, 50, 0), (17, 23, 6), (0, 50, 0),
                                 (40, 0, 0), (40, 50, -9), (30, 50, 30)]:
        rule = (i < q_len) & (j < kv_len)
        if causal:
          rule &= j <= i + off
        if window is not None:
          rule &= (i + off - window[0] <= j) & (j <= i + off + window[1])
        got = masks.position_visible(spec, i, j, q_len, kv_len, off)
        np.testing.assert_array_equal(got, rule)
        lo, n = masks.visible_span(spec, j, q_len, kv_len, off,
                                   kv_major=True)
        np.testing.assert_array_equal((i - lo >= 0) & (i - lo < n), rule)
        assert (np.asarray(n) >= 0).all()


def test_backward_is_deterministic():
  q, k, v, kw = Case("det", t=97, s=97, n=4, k=1, causal=True, segments=True).inputs()
  f = jax.jit(jax.grad(lambda q, k, v: jnp.sum(
      pf.flash_attention(q, k, v, implementation=IMPL, **kw) ** 2), (0, 1, 2)))
  g1, g2 = f(q, k, v), f(q, k, v)
  for a, b in zip(g1, g2):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_jit_vmap_grad_checkpoint():
  q, k, v, kw = Case("tx", b=2, t=33, s=33, causal=True).inputs()
  f = functools.partial(pf.flash_attention, implementation=IMPL, **kw)
  ref = functools.partial(pf.flash_attention, implementation="xla", **kw)
  np.testing.assert_allclose(jax.jit(f)(q, k, v), ref(q, k, v), atol=1e-5)
  # vmap over an extra leading axis (batch of batches)
  qq, kk, vv = (jnp.stack([x, 2 * x]) for x in (q, k, v))
  np.testing.assert_allclose(jax.vmap(f)(qq, kk, vv), jax.vmap(ref)(qq, kk, vv), atol=1e-5)
  loss = lambda fn: (lambda q, k, v: jnp.sum(jnp.sin(fn(q, k, v))))
  g = jax.grad(jax.checkpoint(loss(f)), (0, 1, 2))(q, k, v)
  g_ref = jax.grad(loss(ref), (0, 1, 2))(q, k, v)
  for a, b in zip(g, g_ref):
    np.testing.assert_allclose(a, b, atol=1e-4)


@pytest.mark.parametrize("impl", IMPLS)
def test_vmap_of_vjp_is_the_calls_one_by_one(impl):
  """jax.vmap over the forward and backward gives the per-element calls
  stacked (``sharding._batch_folded`` folds the mapped axis into the batch;
  the d64 Mosaic backward has no batching rule of its own): mapped and
  unmapped K / V and per-element lengths; with Triton also B = 2 and a
  one-row bias, mapped (broadcast to B inside the fold) and unmapped (kept
  broadcast).  Bit for bit in interpret mode; natively within bf16 rounding
  (XLA's fusions around the kernels may reduce in another order for
  another batch)."""
  mosaic = impl == "mosaic"  # (interpret mode's time: the smaller case)
  vs, b, t, n, h = 2, 1 if mosaic else 2, 64, 2, 64
  ks = jax.random.split(jax.random.key(7), 5)
  q, k, v, ct = (jax.random.normal(key, (vs, b, t, n if i in (0, 3) else 1, h),
                                   jnp.bfloat16) for i, key in enumerate(ks[:4]))
  lengths = jnp.array([[64, 50][:b], [37, 64][:b]], jnp.int32)
  bias = (None if mosaic else
          jax.random.normal(ks[4], (vs, 1, n, t, t), jnp.bfloat16))

  def vjp(q, k, v, lengths, ct, bias):
    out, pull = jax.vjp(lambda q, k, v: pf.flash_attention(
        q, k, v, bias, is_causal=True, key_value_seq_lengths=lengths,
        implementation=impl), q, k, v)
    return out, *pull(ct)

  for axes in ((0, 0, 0, 0, 0, 0), (0, None, None, None, 0, None)):
    if mosaic and axes[1] is None:
      continue  # (interpret mode's time: the mapped case had the bug)
    pick = lambda x, a, i: x if a is None or x is None else x[i]
    args = [x if a == 0 or x is None else x[0]
            for x, a in zip((q, k, v, lengths, ct, bias), axes)]
    got = jax.jit(jax.vmap(vjp, in_axes=axes))(*args)
    one_by_one = [vjp(*(pick(x, a, i) for x, a in zip(args, axes)))
                  for i in range(vs)]
    exact = jax.default_backend() == "cpu"
    for g, w, tol in zip(got, zip(*one_by_one), ("out", "grad", "grad", "grad")):
      chex.assert_shape(g, (vs, *w[0].shape))
      w = jnp.stack(w)
      if exact:
        np.testing.assert_array_equal(np.asarray(g, np.float32),
                                      np.asarray(w, np.float32))
      else:
        assert _rel(g, w) <= TOL["bfloat16"][tol] / 4, (axes, tol, _rel(g, w))


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("h", [64, 128])
def test_grad_through_checkpoint_and_scan(impl, h):
  """Gradients through jax.checkpoint (default policy and dots_saveable)
  and through a lax.scan over layers match the reference's, on every kernel
  path (the Mosaic one natively: its interpreter's io_callbacks are effects,
  which checkpoint refuses, so on a CPU only the scan runs for it)."""
  ks = jax.random.split(jax.random.key(11), 3)
  q = jax.random.normal(ks[0], (1, 64, 2, h), jnp.bfloat16)
  k, v = (jax.random.normal(key, (1, 64, 1, h), jnp.bfloat16) for key in ks[1:])

  def loss(q, k, v, impl=impl):
    out = pf.flash_attention(q, k, v, is_causal=True, implementation=impl)
    return jnp.sum(jnp.sin(out.astype(jnp.float32)))

  def scanned(q, k, v):  # two "layers" of the same call
    body = lambda c, _: (c + loss(q, k, v), None)
    return jax.lax.scan(body, 0.0, None, length=2)[0] / 2

  ref = jax.grad(functools.partial(loss, impl="xla"), (0, 1, 2))(q, k, v)
  variants = {"scan": scanned}
  if impl != "mosaic" or jax.default_backend() == "gpu":
    variants["checkpoint"] = jax.checkpoint(loss)
    variants["dots_saveable"] = jax.checkpoint(
        loss, policy=jax.checkpoint_policies.dots_saveable)
  for name, fn in variants.items():
    grads = jax.jit(jax.grad(fn, (0, 1, 2)))(q, k, v)
    for g, r in zip(grads, ref):
      assert _rel(g, r) <= TOL["bfloat16"]["grad"], (name, _rel(g, r))


def test_no_batch_dim_and_scale():
  q, k, v, kw = Case("nobatch", b=1, t=17, s=33).inputs()
  out = pf.flash_attention(q[0], k[0], v[0], scale=0.3, implementation=IMPL)
  ref = jax.nn.dot_product_attention(q[0], k[0], v[0], scale=0.3)
  chex.assert_shape(out, q.shape[1:])
  np.testing.assert_allclose(out, ref, atol=1e-5)


def test_default_implementation_and_bias():
  q, k, v, _ = Case("bias", t=17, s=17).inputs()
  bias = jax.random.normal(jax.random.key(3), (1, 2, 17, 17))
  ref = jax.nn.dot_product_attention(q, k, v, bias=bias)
  np.testing.assert_allclose(pf.flash_attention(q, k, v, bias=bias), ref, atol=1e-5)
  np.testing.assert_allclose(
      pf.flash_attention(q, k, v, bias=bias, implementation="triton"), ref,
      atol=1e-5)
  with pytest.raises(NotImplementedError, match="bias"):  # falls back to triton
    pf.flash_attention(q.astype(jnp.bfloat16), k.astype(jnp.bfloat16),
                       v.astype(jnp.bfloat16), bias=bias, implementation="mosaic")


def test_custom_config():
  q, k, v, kw = Case("cfg", t=97, s=97, causal=True).inputs()
  cfg = pf.TritonConfig(block_q=32, block_k=16, block_q_dkv=16, block_k_dkv=32,
                        block_q_dq=32, block_k_dq=16)
  out = pf.flash_attention(q, k, v, implementation=IMPL, config=cfg, **kw)
  ref = pf.flash_attention(q, k, v, implementation="xla", **kw)
  np.testing.assert_allclose(out, ref, atol=2e-5)
  with pytest.raises(ValueError, match="block_q=48"):
    pf.TritonConfig(block_q=48)


def _bad(**over):
  q = jnp.zeros((2, 8, 4, 16))
  k = jnp.zeros((2, 9, 2, 16))
  args = dict(query=q, key=k, value=k)
  args.update(over)
  return args


@pytest.mark.parametrize("args, match", [
    (_bad(query=jnp.zeros((8, 16))), "query must be"),
    (_bad(key=jnp.zeros((9, 2, 16)), value=jnp.zeros((9, 2, 16))), "same rank"),
    (_bad(key=jnp.zeros((2, 9, 2, 32)), value=jnp.zeros((2, 9, 2, 32))), "head_dim of key"),
    (_bad(value=jnp.zeros((2, 9, 2, 8))), "value shape"),
    (_bad(key=jnp.zeros((2, 9, 2, 16), jnp.bfloat16), value=jnp.zeros((2, 9, 2, 16), jnp.bfloat16)), "dtypes must match"),
    (_bad(query=jnp.zeros((2, 8, 4, 16), jnp.int32)), "dtype int32"),
    (_bad(key=jnp.zeros((2, 9, 3, 16)), value=jnp.zeros((2, 9, 3, 16))), "num_heads=4 must be a multiple of num_kv_heads=3"),
    (_bad(query=jnp.zeros((2, 8, 4, 320)), key=jnp.zeros((2, 9, 2, 320)), value=jnp.zeros((2, 9, 2, 320))), "head_dim=320"),
    (_bad(key=jnp.zeros((3, 9, 2, 16)), value=jnp.zeros((3, 9, 2, 16))), "batch of key"),
    (_bad(query_seq_lengths=jnp.array([1, 2, 3], jnp.int32)), "query_seq_lengths must be"),
    (_bad(key_value_seq_lengths=jnp.array([1.0, 2.0])), "key_value_seq_lengths must be"),
    (_bad(query_segment_ids=jnp.zeros((2, 7), jnp.int32), key_value_segment_ids=jnp.zeros((2, 9), jnp.int32)), "query_segment_ids must be"),
    (_bad(query_segment_ids=jnp.zeros((2, 8), jnp.int32)), "key_value_segment_ids is required"),
    (_bad(key_value_segment_ids=jnp.zeros((2, 9), jnp.int32)), "without query_segment_ids"),
    (_bad(mask=jnp.ones((2, 4, 8, 5), bool)), "does not broadcast"),
    (_bad(mask=jnp.ones((2, 4, 8, 9), jnp.int32)), "mask must be boolean"),
    (_bad(bias=jnp.ones((3, 1, 8, 9))), "bias of shape"),
    (_bad(local_window_size=(-1, 2)), "local_window_size"),
    (_bad(logits_soft_cap=0.0), "logits_soft_cap=0.0"),
    (_bad(scale=float("nan")), "scale=nan"),
    (_bad(implementation="cuda"), "implementation='cuda'"),
    (_bad(causal_alignment="center"), "causal_alignment='center'"),
    (_bad(deterministic="no"), "deterministic='no' must be a bool"),
])
def test_bad_input_raises_value_error(args, match):
  with pytest.raises(ValueError, match=match):
    pf.flash_attention(**args)


SLOW = [
    Case("slow_h128_causal_bf16", b=2, t=1025, s=1025, n=4, k=4, h=128, dtype="bfloat16", causal=True),
    Case("slow_h256_bf16", b=1, t=513, s=700, n=2, k=1, h=256, dtype="bfloat16"),
    Case("slow_h64_segments_fp16", b=2, t=1000, s=1000, n=4, k=2, h=64, dtype="float16", segments=True, causal=True),
    Case("slow_h192_window", b=1, t=777, s=900, n=2, k=2, h=192, dtype="bfloat16", window=(100, 10),
         causal=True, bottom_right=True),
]


@pytest.mark.slow
@pytest.mark.parametrize("case, impl", _supported(SLOW))
def test_large_forward_and_gradients(case: Case, impl: str):
  test_forward_matches_reference(case, impl)
  test_gradients_match_reference_vjp(case, impl)


@pytest.mark.parametrize("rate", [0.0, 0.1])
def test_triton_backward_takes_precomputed_delta(rate):
  """``delta=`` (the ring's backward passes it, out=None) gives the bits of
  the default backward, with dropout's scaling applied to it."""
  from pallas_flash.triton import backward
  check_backward_takes_delta(backward.backward, "triton", jnp.float32, rate)
