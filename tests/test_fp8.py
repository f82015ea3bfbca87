"""The fp8 (float8_e4m3fn) forward: ``flash_attention(q, k, v, q_descale=,
k_descale=, v_descale=)`` against the float32 reference fed the same
dequantized values (``x.astype(f32) * descale``).

The Mosaic kernel runs in Mosaic GPU interpret mode on a CPU (tiny sizes)
and natively on a Hopper GPU (``slow``: larger cases too); descale
broadcasting, bad descales, the fallbacks, gradients and the CUDA lowering
run anywhere.

Tolerance: the kernel rounds P to e4m3 (3 mantissa bits: up to 2^-4
relative per probability) before the P V GEMM and writes O in bf16, so O's
error is a few percent of max|O| (``TOL``); S = Q K^T is exact in f32 (e4m3
products accumulated in f32), so the LSE is close.
"""
from __future__ import annotations

import dataclasses
import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_flash as pf
from cases import Case, rel_err
from pallas_flash import _dispatch
from pallas_flash.mosaic import forward as mosaic_forward, v_transpose
from pallas_flash.mosaic.config import MosaicConfig

ON_GPU = jax.default_backend() == "gpu"
ON_HOPPER = ON_GPU and str(getattr(jax.devices()[0], "compute_capability",
                                   "")).startswith("9")
F8 = jnp.float8_e4m3fn
# out: max|out - ref| / max|ref| and rms(out - ref) / rms(ref); lse:
# max|lse - ref|.  Measured on the interpret cases: out max 1.5-4.4e-2, rms
# 2.0-3.1e-2, lse 1e-6 (the GPU's exp2 is approximate).  e4m3 rounds each
# probability by up to 2^-4 relative (3.6% rms); with random V, O's
# relative error is of that order.
TOL = dict(out=6e-2, out_rms=4e-2, lse=2e-3)


def rms_err(x, ref):
  x, ref = np.asarray(x, np.float32), np.asarray(ref, np.float32)
  return float(np.sqrt(np.mean((x - ref) ** 2) / max(np.mean(ref ** 2),
                                                     1e-12)))

# Interpret-mode sizes (a few seconds each on 2 CPU cores); one batch row
# and head unless said; "descale" is the shape of the three descales.
M = functools.partial(Case, b=1, t=128, s=128, n=1, k=1, dtype="float8_e4m3fn")
CASES = [
    M("d64", b=2, n=2, k=2),
    M("d128 causal T200 S130 top_left", h=128, t=200, s=130, causal=True),
    M("d128 causal T100 S333 bottom_right, lengths (incl. empty row)", h=128,
      b=2, t=100, s=333, causal=True, bottom_right=True, q_lengths=(100, 0),
      kv_lengths=(333, 70)),
    M("d256 T64 S200", h=256, t=64, s=200),
    M("d96 gqa 4/2 causal", h=96, n=4, k=2, causal=True),
    M("window (40, 10)", t=256, s=256, causal=True, window=(40, 10)),
    M("segments", t=256, s=256, causal=True, segments=True),
    M("soft-cap", t=130, s=97, soft_cap=5.0),
    M("d40 persistent, softmax overlap, lengths", h=40, b=2, t=256, s=256,
      q_lengths=(256, 100), kv_lengths=(200, 256),
      config=MosaicConfig(persistent=True, overlap_softmax=True)),
    M("three consumers", t=192, s=256, config=MosaicConfig(consumers=3)),
    M("three persistent consumers d128 causal, lengths", h=128, b=2, t=300,
      s=256, causal=True, q_lengths=(300, 40), kv_lengths=(256, 256),
      config=MosaicConfig(consumers=3, persistent=True)),
    M("row max / sum as a tree", h=128, t=128, s=512,
      config=MosaicConfig(block_kv=256, row_tree=16)),
]
GPU_CASES = [
    M("gpu d128 S2k, 16 accumulators a row", b=2, t=2048, s=2048, n=4, k=4,
      h=128, config=MosaicConfig(block_kv=256, reduce_ilp=16)),
    M("gpu d128 S2k, row tree", b=2, t=2048, s=2048, n=4, k=4, h=128,
      config=MosaicConfig(block_kv=256, persistent=True, row_tree=16)),
    M("gpu d64 S2k", b=2, t=2048, s=2048, n=4, k=2, h=64),
    M("gpu d128 S2k causal", b=2, t=2048, s=2048, n=4, k=4, h=128,
      causal=True),
    M("gpu d128 S1k ragged bottom_right", b=2, t=777, s=1500, n=4, k=1,
      h=128, causal=True, bottom_right=True, q_lengths=(777, 300),
      kv_lengths=(1500, 900)),
    M("gpu d256 S1k", b=2, t=1024, s=1024, n=4, k=2, h=256),
    M("gpu d128 S4k window", b=1, t=4096, s=4096, n=4, k=4, h=128,
      causal=True, window=(512, 0)),
    M("gpu d64 S1k segments soft-cap", b=2, t=1024, s=1024, n=2, k=2,
      segments=True, soft_cap=20.0),
    M("gpu d128 S2k causal, softmax overlap", b=2, t=2048, s=2048, n=4, k=4,
      h=128, causal=True, config=MosaicConfig(overlap_softmax=True,
                                              persistent=True,
                                              heads_inner=True)),
    M("gpu d128 S2k causal, three persistent consumers", b=2, t=2048,
      s=2048, n=8, k=4, h=128, causal=True, config=MosaicConfig(
          consumers=3, persistent=True, heads_inner=True)),
    M("gpu d128 S2k, three persistent consumers, 4 stages", b=2, t=2048,
      s=2000, n=8, k=8, h=128, config=MosaicConfig(
          consumers=3, persistent=True, num_stages=4)),
]


def descales(b, k, shape, seed=0):
  """Three random float32 descales in [0.25, 1] of ``shape`` (given as
  letters: "", "B1", "1K", "BK", "K")."""
  dims = {"": (), "B1": (b, 1), "1K": (1, k), "BK": (b, k), "K": (k,)}[shape]
  keys = jax.random.split(jax.random.key(seed), 3)
  return [jax.random.uniform(key, dims, jnp.float32, 0.25, 1.0)
          for key in keys]


def dequantized(q, k, v, ds):
  """The real values: x.astype(f32) * descale, descales broadcast to
  [B, K] (query head n reads kv head n // G)."""
  b, kh = k.shape[0], k.shape[2]
  g = q.shape[2] // kh
  bk = [jnp.broadcast_to(d, (b, kh)) for d in ds]
  return (q.astype(jnp.float32) * jnp.repeat(bk[0], g, 1)[:, None, :, None],
          k.astype(jnp.float32) * bk[1][:, None, :, None],
          v.astype(jnp.float32) * bk[2][:, None, :, None])


def check_fp8(case, impl, shape="BK", seed=0):
  """fp8 ``flash_attention`` against the float32 reference on the same
  real values: dtypes, shapes, finiteness, ``TOL``.  Returns the errors."""
  q, k, v, kw = case.inputs(seed)
  ds = descales(q.shape[0], k.shape[2], shape, seed)
  names = ("q_descale", "k_descale", "v_descale")
  static = {n: x for n, x in kw.items() if not isinstance(x, jax.Array)}
  arrays = {n: x for n, x in kw.items() if n not in static}
  attend = jax.jit(lambda q, k, v, ds, arrays: pf.flash_attention(
      q, k, v, implementation=impl, config=case.config, return_residual=True,
      **dict(zip(names, ds)), **static, **arrays))
  out, lse = attend(q, k, v, ds, arrays)
  ref, ref_lse = jax.jit(lambda q, k, v, arrays: pf.flash_attention(
      q, k, v, implementation="xla", return_residual=True, **static,
      **arrays))(*dequantized(q, k, v, ds), arrays)
  chex.assert_shape(out, q.shape)
  assert out.dtype == jnp.bfloat16 and lse.dtype == jnp.float32
  chex.assert_tree_all_finite((out, lse))
  errs = (rel_err(out, ref), rms_err(out, ref),
          float(jnp.max(jnp.abs(lse - ref_lse))))
  assert all(e <= TOL[n] for e, n in zip(errs, ("out", "out_rms", "lse"))), (
      case.name, errs)
  return errs


# --- the Mosaic kernel ---------------------------------------------------------

needs_mosaic = pytest.mark.skipif(
    ON_GPU and not ON_HOPPER, reason="the Mosaic fp8 kernel needs Hopper")
if not ON_GPU:  # (conftest marks test_mosaic.py's; -m mgpu_interpret)
  needs_mosaic = lambda f, _skip=needs_mosaic: pytest.mark.mgpu_interpret(
      _skip(f))


@needs_mosaic
@pytest.mark.parametrize("case", CASES, ids=str)
def test_forward(case):
  check_fp8(case, "mosaic")


@needs_mosaic
@pytest.mark.slow
@pytest.mark.parametrize("case", GPU_CASES, ids=str)
def test_forward_large(case):
  if not ON_GPU:
    pytest.skip("GPU sizes (interpret mode would take minutes)")
  check_fp8(case, "mosaic")


@needs_mosaic
def test_fully_masked_rows_output_zero():
  case = M("empty rows", b=2, t=64, s=128, q_lengths=(64, 0),
           kv_lengths=(0, 128))
  q, k, v, kw = case.inputs()
  out, lse = pf.flash_attention(q, k, v, implementation="mosaic",
                                return_residual=True, **kw)
  assert out.dtype == jnp.bfloat16 and not jnp.any(out)
  np.testing.assert_array_equal(lse, np.float32(pf.MASKED_LSE))


# --- descales ------------------------------------------------------------------

@pytest.mark.parametrize("shape", ["", "B1", "1K", "BK", "K"])
def test_descales_broadcast(shape):
  """Each shape broadcastable to [B, K] means the same real values (the
  reference path; the kernel reads the same [B, K] arrays)."""
  check_fp8(M("gqa", b=2, t=33, s=40, n=4, k=2), "xla", shape)


@needs_mosaic
def test_kernel_descales_per_batch_and_kv_head():
  check_fp8(M("gqa BK", b=2, t=64, s=200, n=4, k=2, causal=True), "mosaic",
            "BK", seed=3)


def _fp8(b=2, t=8, n=4, kh=2, h=64):
  q = jnp.ones((b, t, n, h), F8)
  kv = jnp.ones((b, t, kh, h), F8)
  return q, kv, kv


@pytest.mark.parametrize("kw,match", [
    (dict(q_descale=jnp.ones((), jnp.bfloat16)), "q_descale must be float32"),
    (dict(k_descale=np.ones((2,), np.float64)), "k_descale must be float32"),
    (dict(v_descale=jnp.ones((2, 4), jnp.float32)),
     r"v_descale of shape \(2, 4\) does not broadcast to \[B, K\] = \[2, 2\]"),
    (dict(q_descale=jnp.ones((3,), jnp.float32)), "q_descale of shape"),
    (dict(q_descale=jnp.ones((1, 2, 2), jnp.float32)), "q_descale of shape"),
    (dict(k_descale=-1.0), r"k_descale=-1.0 must be finite and > 0"),
    (dict(v_descale=jnp.array([1.0, 0.0], jnp.float32)),
     "v_descale=.* must be finite and > 0"),
    (dict(q_descale=float("nan")), "q_descale=nan must be finite"),
    (dict(q_descale="1"), "q_descale must be float32"),
])
def test_bad_descales_raise(kw, match):
  with pytest.raises(ValueError, match=match):
    pf.flash_attention(*_fp8(), **kw)


def test_descale_without_fp8_inputs_raises():
  x = jnp.ones((2, 8, 2, 64), jnp.bfloat16)
  with pytest.raises(ValueError, match="q_descale is given but the inputs "
                     "are bfloat16"):
    pf.flash_attention(x, x, x, q_descale=1.0)


def test_mixed_and_other_fp8_dtypes_raise():
  q, k, v = _fp8()
  with pytest.raises(ValueError, match="float8_e4m3fn inputs must be all of"):
    pf.flash_attention(q, k.astype(jnp.bfloat16), v)
  with pytest.raises(ValueError, match="query dtype float8_e5m2 must be"):
    pf.flash_attention(*(x.astype(jnp.float8_e5m2) for x in (q, k, v)))
  with pytest.raises(ValueError, match="query dtype float8_e4m3fn must be"):
    pf.ring_attention(q, k, v, axis_name="x")  # fp8 is flash_attention's


def test_traced_non_positive_descale_gives_nan():
  q, k, v = _fp8()
  f = jax.jit(lambda d: pf.flash_attention(q, k, v, implementation="xla",
                                           k_descale=d))
  assert jnp.all(jnp.isfinite(f(jnp.float32(0.5).reshape(()))))
  out = f(jnp.array([[1.0, -1.0]], jnp.float32))
  assert jnp.all(jnp.isfinite(out[:, :, :2])) and jnp.all(
      jnp.isnan(out[:, :, 2:]))


# --- dispatch and fallbacks ------------------------------------------------------

@pytest.fixture
def hopper(monkeypatch):
  monkeypatch.setattr(_dispatch, "on_gpu", lambda: True)
  monkeypatch.setattr(_dispatch, "is_hopper", lambda: True)
  monkeypatch.setattr(mosaic_forward, "_num_sms", lambda: 132)


def _lower(fn, *args):
  return jax.jit(fn).trace(*args).lower(
      lowering_platforms=("cuda",)).as_text()


@pytest.mark.parametrize("h,causal", [(64, False), (64, True), (128, False),
                                      (128, True), (256, False)])
def test_default_hopper_path_lowers_to_fp8_wgmma(hopper, monkeypatch,
                                                 whole_copy_slices, h, causal):
  """implementation=None on a Hopper: the Mosaic kernel, both GEMMs e4m3
  wgmma (lowered for CUDA on any machine; the device check is patched); no
  unswizzled copy overhangs its array (T = 1000, conftest)."""
  real_check = mosaic_forward.check_supported
  monkeypatch.setattr(
      mosaic_forward, "check_supported",
      lambda p, *a: real_check(dataclasses.replace(p, interpret=True), *a))
  q = jax.ShapeDtypeStruct((2, 1000, 4, h), F8)
  kv = jax.ShapeDtypeStruct((2, 1000, 2, h), F8)
  text = _lower(lambda q, k, v: pf.flash_attention(
      q, k, v, is_causal=causal, q_descale=0.5, v_descale=2.0), q, kv, kv)
  assert "pallas_flash_mosaic_fwd" in text
  wgmmas = set(t for t in text.split() if t.startswith("wgmma.mma_async"))
  assert wgmmas and all(w.endswith(".f32.e4m3.e4m3") for w in wgmmas), wgmmas
  assert whole_copy_slices.copies and not whole_copy_slices.unclipped()


@pytest.mark.parametrize("extra", ["alibi", "dropout", "bias"])
def test_kernel_less_options_fall_back_to_the_reference(hopper, extra):
  """ALiBi, dropout or a bias with fp8 inputs: no fp8 kernel takes them;
  implementation=None takes the reference on the dequantized values,
  implementation="mosaic" raises NotImplementedError."""
  q, k, v = _fp8()
  kw = {"alibi": dict(alibi_slopes=jnp.ones((4,), jnp.float32)),
        "dropout": dict(dropout_rate=0.1, dropout_rng=jax.random.key(0)),
        "bias": dict(bias=jnp.zeros((1, 4, 8, 8), jnp.float32))}[extra]
  text = _lower(lambda q, k, v: pf.flash_attention(q, k, v, **kw), q, k, v)
  assert "pallas_flash" not in text and "mosaic_gpu" not in text
  with pytest.raises(NotImplementedError, match="fp8|float8|bias"):
    pf.flash_attention(q, k, v, implementation="mosaic", **kw)


def test_triton_takes_no_fp8():
  with pytest.raises(NotImplementedError, match="float8_e4m3fn"):
    pf.flash_attention(*_fp8(), implementation="triton")


# --- gradients -----------------------------------------------------------------

@pytest.mark.parametrize("impl", ["xla", "mosaic"])
def test_gradients_through_fp8_raise(impl):
  """Forward only: a derivative w.r.t. an fp8 input or a descale raises
  (an e4m3 cotangent would be silently rounded); one w.r.t. something else
  passes through."""
  q, k, v = _fp8(t=64, n=2, kh=2)
  loss = lambda q, k, v, d: jnp.sum(pf.flash_attention(
      q, k, v, implementation=impl, v_descale=d).astype(jnp.float32))
  d = jnp.float32(1.0)
  with pytest.raises(ValueError, match="float8_e4m3fn inputs is forward "
                     "only: differentiating w.r.t. query"):
    jax.grad(loss)(q, k, v, d)
  with pytest.raises(ValueError, match="w.r.t. descales"):
    jax.grad(loss, argnums=3)(q, k, v, d)
  # A bf16 q quantized inside the loss: the error names fp8 as well.
  with pytest.raises(ValueError, match="float8_e4m3fn"):
    jax.grad(lambda x: loss(x.astype(F8), k, v, d))(q.astype(jnp.bfloat16))
  # Nothing perturbed flows into the call: no error, zero gradient.
  g = jax.grad(lambda x: loss(q, k, v, d) * 0.0 + x)(jnp.float32(2.0))
  assert g == 1.0


# --- pallas_flash.fp8: quantization and the Hadamard rotation -----------------

def _outlier_inputs(key, shape):
  """Standard normal with 1% of the entries times 10 (outlier features)."""
  a, b = jax.random.split(key)
  x = jax.random.normal(a, shape, jnp.float32)
  return jnp.where(jax.random.bernoulli(b, 0.01, shape), 10.0 * x, x)


@pytest.mark.parametrize("per", ["tensor", "head"])
def test_quantize_round_trip(per):
  """Dequantized values within e4m3's half-ulp (2^-4 relative, plus the
  subnormal step) of the input; the descale has the shape the API takes."""
  x = _outlier_inputs(jax.random.key(1), (2, 33, 3, 40)).astype(jnp.bfloat16)
  x = x.at[1, :, 2].set(0.0)  # an all-zero head: descale 1, zeros back
  x8, d = pf.fp8.quantize(x, per=per)
  assert x8.dtype == jnp.float8_e4m3fn and d.dtype == jnp.float32
  assert d.shape == ((2, 3) if per == "head" else ())
  back = x8.astype(jnp.float32) * (d[:, None, :, None] if per == "head" else d)
  xf = x.astype(jnp.float32)
  amax = jnp.max(jnp.abs(xf))
  assert float(jnp.max(jnp.abs(back))) <= float(amax) * (1 + 2 ** -4)
  tol = 2.0 ** -4 * jnp.abs(xf) + (d[:, None, :, None] if per == "head"
                                   else d) * 2.0 ** -9
  assert bool(jnp.all(jnp.abs(back - xf) <= tol))
  if per == "head":
    assert float(d[1, 2]) == 1.0 and not bool(jnp.any(back[1, :, 2]))


def test_quantize_per_kv_head_group_feeds_gqa():
  """A GQA query quantized per (batch row, kv head group) gives the [B, K]
  descale flash_attention takes; the call matches f32 within fp8 rounding."""
  q = _outlier_inputs(jax.random.key(7), (2, 40, 6, 32))
  k, v = (_outlier_inputs(jax.random.key(s), (2, 40, 2, 32)) for s in (8, 9))
  q8, qd = pf.fp8.quantize(q, per="head", kv_heads=2)
  assert qd.shape == (2, 2)
  group_amax = jnp.max(jnp.abs(q.reshape(2, 40, 2, 3, 32)), axis=(1, 3, 4))
  np.testing.assert_allclose(qd, group_amax / 448.0, rtol=1e-6)
  (k8, kd), (v8, vd) = (pf.fp8.quantize(x, per="head") for x in (k, v))
  got = pf.flash_attention(q8, k8, v8, q_descale=qd, k_descale=kd,
                           v_descale=vd, is_causal=True, implementation="xla")
  want = pf.flash_attention(q, k, v, is_causal=True, implementation="xla")
  assert rel_err(got, want) < 0.15
  with pytest.raises(ValueError, match="kv_heads"):
    pf.fp8.quantize(q, per="head", kv_heads=4)


def test_hadamard_rotate_keeps_scores_and_spreads_outliers():
  q = _outlier_inputs(jax.random.key(2), (1, 17, 2, 64))
  k = _outlier_inputs(jax.random.key(3), (1, 19, 2, 64))
  qr, kr = pf.fp8.hadamard_rotate(q), pf.fp8.hadamard_rotate(k)
  scores = lambda a, b: jnp.einsum("btnh,bsnh->bnts", a, b)
  np.testing.assert_allclose(scores(qr, kr), scores(q, k), atol=2e-4, rtol=1e-4)
  # orthonormal: norms kept; an outlier's weight spread: a smaller max |x|
  np.testing.assert_allclose(jnp.linalg.norm(qr, axis=-1),
                             jnp.linalg.norm(q, axis=-1), rtol=1e-5)
  assert float(jnp.max(jnp.abs(qr))) < 0.6 * float(jnp.max(jnp.abs(q)))


def test_hadamard_rotation_cuts_the_quantization_error():
  """FA3's incoherent processing, end to end on the reference path: with
  outlier inputs the rotated, quantized call is closer to the f32 output
  (RMSE ratio 0.70-0.78 over seeds at this size; FA3 Sec. 4.3)."""
  b, t, n, h = 2, 128, 4, 64
  q, k, v = (_outlier_inputs(jax.random.key(s), (b, t, n, h)) for s in (4, 5, 6))
  want = pf.flash_attention(q, k, v, implementation="xla")

  def fp8_call(q, k):
    (q8, qd), (k8, kd), (v8, vd) = (pf.fp8.quantize(x, per="head")
                                    for x in (q, k, v))
    return pf.flash_attention(q8, k8, v8, q_descale=qd, k_descale=kd,
                              v_descale=vd, implementation="xla")

  rmse = lambda x: float(jnp.sqrt(jnp.mean((x.astype(jnp.float32) - want)**2)))
  plain = rmse(fp8_call(q, k))
  rotated = rmse(fp8_call(pf.fp8.hadamard_rotate(q), pf.fp8.hadamard_rotate(k)))
  assert rotated < 0.85 * plain, (rotated, plain)


@pytest.mark.parametrize("shape", [(2, 256, 3, 128), (1, 384, 2, 64)])
def test_v_transpose_kernel_matches_xla(shape):
  """The fp8 forward's V^T (``v_transpose``): the Pallas-Triton kernel's
  bytes equal XLA's transpose in ``fp8_key_order`` (Triton interpret mode
  on a CPU, natively on a GPU); on a GPU ``transposed`` takes the kernel at
  H = 128."""
  v = (4.0 * jax.random.normal(jax.random.key(5), shape)).astype(F8)
  want = v_transpose.fp8_key_order(jnp.transpose(v, (0, 2, 3, 1)))
  got = v_transpose.transpose_triton(v, interpret=not ON_GPU)
  np.testing.assert_array_equal(np.asarray(got.view(jnp.uint8)),
                                np.asarray(want.view(jnp.uint8)))
  np.testing.assert_array_equal(
      np.asarray(v_transpose.transposed(v, interpret=False).view(jnp.uint8)),
      np.asarray(want.view(jnp.uint8)))
  with pytest.raises(ValueError, match="multiple of 128"):
    v_transpose.transpose_triton(v[:, :100])


def test_fp8_helpers_bad_input():
  with pytest.raises(ValueError, match="per"):
    pf.fp8.quantize(jnp.ones((1, 2, 1, 8)), per="row")
  with pytest.raises(ValueError, match="shape"):
    pf.fp8.quantize(jnp.ones((2, 8)), per="head")
  with pytest.raises(ValueError, match="dtype"):
    pf.fp8.quantize(jnp.ones((2, 8), jnp.int32))
  with pytest.raises(ValueError, match="kv_heads"):
    pf.fp8.quantize(jnp.ones((1, 2, 4, 8)), per="head", kv_heads=0)
  with pytest.raises(ValueError, match="power of 2"):
    pf.fp8.hadamard_rotate(jnp.ones((1, 2, 1, 96)))
