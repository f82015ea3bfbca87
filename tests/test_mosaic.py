"""Mosaic GPU (Hopper) forward against the f32 reference: out and LSE.

One parameterised suite, run natively on a Hopper GPU and in Mosaic GPU
interpret mode on CPU (tiny sizes: the simulator runs every warpgroup, TMA and
barrier in Python).  Larger cases are ``@pytest.mark.slow`` (GPU: ``-m slow``).
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pallas_flash import masks, reference
from pallas_flash.mosaic import forward as mosaic_forward
from pallas_flash.mosaic.config import MosaicConfig
from pallas_flash.params import KernelParams

ON_GPU = jax.default_backend() == "gpu"
ON_HOPPER = ON_GPU and str(getattr(jax.devices()[0], "compute_capability",
                                   "")).startswith("9")
INTERPRET = not ON_GPU
if ON_GPU and not ON_HOPPER:  # pragma: no cover
  pytest.skip("the mosaic forward needs Hopper (sm_90); this GPU is not one",
              allow_module_level=True)

# ||out - ref|| / ||ref|| and max |lse - ref| (LSE is computed in f32).
TOL = {"bfloat16": (1e-2, 2e-2), "float16": (2e-3, 2e-2)}


@dataclasses.dataclass(frozen=True)
class Case:
  name: str
  b: int = 1
  t: int = 128
  s: int = 128
  n: int = 1
  kh: int = 1
  h: int = 64
  causal: bool = False
  bottom_right: bool = False
  window: tuple | None = None
  lengths: tuple | None = None  # ((q_len per batch), (kv_len per batch))
  segments: bool = False
  cap: float | None = None
  dtype: str = "bfloat16"
  config: MosaicConfig | None = None
  dense: str | None = None  # "full": [B, N, T, S]; "keys": [1, 1, 1, S]


def _dense_mask(c: Case, key):
  if c.dense == "full":
    m = jax.random.bernoulli(key, 0.7, (c.b, c.n, c.t, c.s))
    return m.at[:, :, 3, :].set(False)  # a fully masked row per head
  if c.dense == "keys":
    return jax.random.bernoulli(key, 0.6, (1, 1, 1, c.s))
  raise ValueError(c.dense)


def _run(c: Case, seed: int = 0):
  ks = jax.random.split(jax.random.key(seed), 4)
  dt = jnp.dtype(c.dtype)
  q = jax.random.normal(ks[0], (c.b, c.t, c.n, c.h), jnp.float32).astype(dt)
  k = jax.random.normal(ks[1], (c.b, c.s, c.kh, c.h), jnp.float32).astype(dt)
  v = jax.random.normal(ks[2], (c.b, c.s, c.kh, c.h), jnp.float32).astype(dt)
  if c.lengths is None:
    q_len = jnp.full((c.b,), c.t, jnp.int32)
    kv_len = jnp.full((c.b,), c.s, jnp.int32)
  else:
    q_len, kv_len = (jnp.array(x, jnp.int32) for x in c.lengths)
  q_seg = kv_seg = None
  if c.segments:
    q_seg = jnp.sort(jax.random.randint(ks[3], (c.b, c.t), 0, 4), axis=-1)
    q_seg = q_seg.at[:, -5:].set(-1)  # padding tokens: fully masked rows
    kv_seg = q_seg
  dense = None if c.dense is None else _dense_mask(c, jax.random.key(seed + 1))
  arrays = masks.MaskArrays(q_len, kv_len, q_seg, kv_seg, dense)
  spec = masks.MaskSpec(
      is_causal=c.causal, bottom_right=c.bottom_right, window=c.window,
      has_segments=c.segments,
      dense_mask_shape=None if dense is None else tuple(dense.shape))
  scale = c.h ** -0.5
  params = KernelParams(spec=spec, scale=scale, logits_soft_cap=c.cap,
                        forward="mosaic", config=c.config, interpret=INTERPRET)
  # Poison check: every element of out/lse is written by the kernel (the
  # wrapper allocates them; NaN would survive the comparisons below).
  out, lse = jax.jit(mosaic_forward.forward, static_argnums=4)(
      q, k, v, arrays, params)
  ref_out, ref_lse = reference.attention(q, k, v, None, arrays, spec=spec,
                                         scale=scale, logits_soft_cap=c.cap)
  assert out.shape == q.shape and out.dtype == q.dtype
  assert lse.shape == (c.b, c.n, c.t) and lse.dtype == jnp.float32
  return out, jnp.transpose(lse, (0, 2, 1)), ref_out, ref_lse


def _compare(c: Case, seed: int = 0):
  out, lse, ref_out, ref_lse = _run(c, seed)
  out, ref_out = (np.asarray(x, np.float32) for x in (out, ref_out))
  lse, ref_lse = np.asarray(lse), np.asarray(ref_lse)
  assert np.all(np.isfinite(out)), "non-finite output"
  rel = np.linalg.norm(out - ref_out) / max(np.linalg.norm(ref_out), 1e-30)
  out_tol, lse_tol = TOL[c.dtype]
  assert rel < out_tol, f"{c.name}: relative error {rel:.2e}"
  masked = ref_lse <= masks.MASKED_LSE / 2
  # Contract: +inf LSE and zero output on fully masked rows.
  assert np.all(np.isposinf(lse[masked])), "fully masked rows need lse=+inf"
  assert np.all(out.transpose(0, 2, 1, 3)[masked.transpose(0, 2, 1)] == 0)
  if np.any(~masked):
    err = np.max(np.abs(lse[~masked] - ref_lse[~masked]))
    assert err < lse_tol, f"{c.name}: lse error {err:.2e}"


# Tiny cases: a few seconds each in interpret mode on 2 CPU cores.
CASES = [
    Case("dense"),
    Case("causal", t=256, s=256, causal=True),
    Case("d128 causal", h=128, causal=True),
    Case("d256", h=256, t=128, s=192),
    Case("ragged T97 S130", t=97, s=130),
    Case("causal T200 S130 top_left", t=200, s=130, causal=True),
    Case("causal T100 S333 bottom_right", t=100, s=333, causal=True,
         bottom_right=True),
    Case("lengths (incl. empty row)", b=2, t=160, s=200, causal=True,
         bottom_right=True, lengths=((150, 0), (200, 77))),
    Case("gqa 4/2", n=4, kh=2, causal=True),
    Case("window (40, 10)", t=256, s=256, causal=True, window=(40, 10)),
    Case("segments", t=256, s=256, causal=True, segments=True),
    Case("soft-cap", cap=3.0),
    Case("fp16", dtype="float16", causal=True),
    Case("head dim 40 (padded)", h=40),
    Case("bk64 3 stages", t=128, s=320, config=MosaicConfig(
        block_q=64, block_kv=64, num_stages=3)),
    Case("dense mask [B,N,T,S]", b=2, n=2, kh=2, t=130, s=200, causal=True,
         dense="full"),
    Case("dense mask [1,1,1,S]", t=128, s=256, dense="keys"),
    Case("softmax overlap, causal, ragged", t=200, s=333, causal=True,
         config=MosaicConfig(overlap_softmax=True)),
    Case("softmax overlap, segments, bk64 ascending", t=256, s=256,
         segments=True, config=MosaicConfig(
             block_kv=64, masked_first=False, overlap_softmax=True)),
    Case("softmax overlap, lengths with empty rows", b=2, t=256, s=256,
         lengths=((256, 0), (256, 40)), config=MosaicConfig(
             overlap_softmax=True)),
    Case("ascending order", t=256, s=300, causal=True,
         window=(100, 20), config=MosaicConfig(
             block_q=64, block_kv=64, num_stages=2, masked_first=False)),
]

# GPU-sized cases (run with -m slow on the GPU).
SLOW = [
    Case("S2k causal d128", b=2, t=2048, s=2048, n=4, kh=4, h=128, causal=True),
    Case("S1k dense d64", b=2, t=1024, s=1024, n=8, kh=8),
    Case("S1k d256 causal", t=1024, s=1024, n=4, kh=4, h=256, causal=True),
    Case("ragged T1000 S1025 d128", t=1000, s=1025, n=2, kh=2, h=128),
    Case("gqa 32/8 causal", t=512, s=512, n=32, kh=8, h=128, causal=True),
    Case("segments S2k", b=2, t=2048, s=2048, n=2, kh=2, h=128, causal=True,
         segments=True),
    Case("window S2k", t=2048, s=2048, n=2, kh=2, h=64, causal=True,
         window=(256, 0)),
    Case("lengths S1k", b=2, t=1024, s=1024, n=2, kh=2, h=128,
         lengths=((1000, 3), (512, 1024))),
    Case("fp16 S1k d128", t=1024, s=1024, n=4, kh=4, h=128, dtype="float16"),
    Case("softcap S1k", t=1024, s=1024, n=2, kh=2, h=128, cap=20.0,
         causal=True),
    Case("dense mask S1k", b=2, t=1000, s=1024, n=2, kh=2, h=128,
         dense="full"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_forward(case):
  _compare(case)


@pytest.mark.slow
@pytest.mark.parametrize("case", SLOW, ids=lambda c: c.name)
def test_forward_large(case):
  if INTERPRET:
    pytest.skip("GPU-sized case: minutes in interpret mode; run on the GPU "
                "with -m slow")
  _compare(case)


def test_deterministic():
  c = Case("determinism", t=128, s=256, causal=True)
  a = _run(c, seed=3)
  b = _run(c, seed=3)
  np.testing.assert_array_equal(np.asarray(a[0]), np.asarray(b[0]))
  np.testing.assert_array_equal(np.asarray(a[1]), np.asarray(b[1]))


def _params(**kw):
  return KernelParams(spec=masks.MaskSpec(**kw), scale=0.1, forward="mosaic",
                      interpret=INTERPRET)


def test_unsupported_raise_not_implemented():
  q = jnp.zeros((1, 128, 1, 64), jnp.float32)
  with pytest.raises(NotImplementedError, match="float16/bfloat16"):
    mosaic_forward.check_supported(_params(), q, q, q)


def test_bad_config():
  q = jnp.zeros((1, 128, 1, 64), jnp.bfloat16)
  params = dataclasses.replace(_params(), config=object())
  with pytest.raises(ValueError, match="MosaicConfig"):
    mosaic_forward.check_supported(params, q, q, q)
  with pytest.raises(ValueError, match="block_kv"):
    MosaicConfig(block_q=64, block_kv=96, num_stages=2)
  with pytest.raises(ValueError, match="num_stages"):
    MosaicConfig(block_q=64, block_kv=128, num_stages=1)


def test_config_table_fits_smem():
  for h in (64, 128, 256):
    for causal in (False, True):
      cfg = MosaicConfig.default(h, causal)
      assert cfg.smem_bytes(h) <= 227 * 1024, (h, causal, cfg)


def test_config_default_without_overlap_when_every_tile_is_masked():
  assert MosaicConfig.default(128, True).overlap_softmax
  assert not MosaicConfig.default(128, True, every_tile_masked=True).overlap_softmax
  assert not MosaicConfig.default(64, False).overlap_softmax


def test_gradients_through_public_api():
  """implementation="mosaic": Mosaic forward, Pallas-Triton backward."""
  import functools

  import pallas_flash as pf

  ks = jax.random.split(jax.random.key(11), 4)
  shape = (1, 130, 2, 64)
  q, k, v = (jax.random.normal(kk, shape, jnp.float32).astype(jnp.bfloat16)
             for kk in ks[:3])
  d_out = jax.random.normal(ks[3], shape, jnp.float32).astype(jnp.bfloat16)
  kw = dict(is_causal=True)
  out, vjp = jax.vjp(functools.partial(pf.flash_attention,
                                       implementation="mosaic", **kw), q, k, v)
  f32 = lambda x: x.astype(jnp.float32)
  ref, ref_vjp = jax.vjp(functools.partial(pf.flash_attention,
                                           implementation="xla", **kw),
                         f32(q), f32(k), f32(v))
  rel = lambda a, b: float(jnp.linalg.norm(f32(a) - b) / jnp.linalg.norm(b))
  assert rel(out, ref) < 1e-2
  for name, g, r in zip("qkv", vjp(d_out), ref_vjp(f32(d_out))):
    assert g.dtype == jnp.bfloat16 and bool(jnp.all(jnp.isfinite(f32(g))))
    assert rel(g, r) < 2e-2, (name, rel(g, r))
