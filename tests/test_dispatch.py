"""``_dispatch.plan``: the forward and backward backend of a validated call,
chosen once, on any machine (the device queries are patched; no kernel
runs)."""
import jax
import jax.numpy as jnp
import pytest

from pallas_flash import _dispatch
from pallas_flash.decode import DecodeConfig
from pallas_flash.mosaic import forward as mosaic_forward
from pallas_flash.mosaic.config import MosaicBackwardConfig, MosaicConfig


def _plan(t, s, h=64, dtype=jnp.bfloat16, implementation=None, config=None,
          bias=False, **kw):
  q = jnp.zeros((2, t, 4, h), dtype)
  kv = jnp.zeros((2, s, 2, h), dtype)
  b = jnp.zeros((1, 4, t, s), dtype) if bias else None
  q, k, v, arrays, spec, scale, cap, _ = _dispatch.validate(
      q, kv, kv, b, None, None, kw.get("is_causal", False), None, None, None,
      implementation, "top_left", None, None, None)
  params = _dispatch.plan(q, k, v, arrays, spec, scale, cap, 0.0,
                          implementation, config, **kw.get("plan", {}))
  return None if params is None else (params.forward, params.backward)


@pytest.fixture
def gpu(monkeypatch):
  monkeypatch.setattr(_dispatch, "on_gpu", lambda: True)
  monkeypatch.setattr(_dispatch, "is_hopper", lambda: False)


@pytest.fixture
def hopper(gpu, monkeypatch):
  monkeypatch.setattr(_dispatch, "is_hopper", lambda: True)
  monkeypatch.setattr(mosaic_forward, "check_supported", lambda *a: None)


def test_cpu_takes_the_reference():
  if jax.default_backend() == "gpu":
    pytest.skip("a CPU-only case")  # the device is not patched here
  assert _plan(128, 128) is None
  assert _plan(128, 128, implementation="triton") == ("triton", "triton")


def test_hopper_prefill_is_mosaic_both_ways(hopper):
  assert _plan(128, 128) == ("mosaic", "mosaic")
  assert _plan(128, 128, h=256) == ("mosaic", "mosaic")  # split head dim
  no_split = MosaicConfig(backward=MosaicBackwardConfig(split_head_dim=False))
  assert _plan(128, 128, h=256, implementation="mosaic",
               config=no_split) == ("mosaic", "triton")
  # a bias: both Mosaic kernels read it, the dQ kernel writes dbias; at
  # d256 (split_head_dim: no room for the bias ring) the Triton backward
  assert _plan(128, 128, bias=True) == ("mosaic", "mosaic")
  assert _plan(128, 128, h=128, bias=True) == ("mosaic", "mosaic")
  assert _plan(128, 128, h=256, bias=True) == ("mosaic", "triton")
  fused = MosaicConfig(backward=MosaicBackwardConfig(fused=True))
  assert _plan(128, 128, bias=True, implementation="mosaic",
               config=fused) == ("mosaic", "triton")


def test_decode_shaped_call_takes_the_decode_kernel(hopper):
  assert _plan(1, 256) == ("decode", "triton")
  assert _plan(1, 256, bias=True) == ("mosaic", "mosaic")  # not decode
  assert _plan(1, 256, plan=dict(ring=True)) == ("mosaic", "mosaic")


def test_other_gpus_take_triton(gpu):
  assert _plan(128, 128) == ("triton", "triton")
  assert _plan(1, 256) == ("decode", "triton")


def test_explicit_implementation(gpu):
  assert _plan(1, 256, implementation="triton") == ("triton", "triton")
  assert _plan(128, 128, implementation="triton",
               config=DecodeConfig()) == ("decode", "triton")
  assert _plan(128, 128, implementation="xla") is None
  with pytest.raises(NotImplementedError, match="Hopper"):
    _plan(128, 128, implementation="mosaic")  # not a Hopper: no fallback
