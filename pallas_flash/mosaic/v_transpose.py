"""V^T for the fp8 forward: fp8 wgmma takes only K-major operands, so the
P V GEMM's B operand is V^T [H, block_kv] (keys contiguous), made from V
[B, S, K, H] before the kernel, one pass over V (read S*K*H bytes, write as
many), its keys in ``fp8_key_order`` (the order ``forward.fp8_p`` leaves
P's keys in, which V^T's layout undoes for free).

Two forms, the same bits: XLA's transpose (``jnp.transpose`` then the key
order: one loop fusion, 24.2 us at [4, 4096, 16, 128], 2.8 TB/s), and a
Pallas-Triton kernel (``transpose_triton``: one program per 128 keys of a
(batch, kv head), the keys gathered in ``fp8_key_order`` on the load, the
[128, H] tile transposed in registers / shared memory and stored as 128-byte
rows; 19.5 us, 3.4 TB/s, H200 2026-11-30, `tools.kernel_times`' trace of
the two).  The kernel runs at H = 128 only: at H = 64 it read 24.5 us
against XLA's 23.9.
"""
from __future__ import annotations

import jax
import jax.experimental.pallas as pl
from jax.experimental.pallas import triton as pl_triton
import jax.numpy as jnp

_KEYS = 128  # keys a program of ``transpose_triton`` moves (8 warps)


def fp8_key_order(x):
  """x [..., keys] with its keys reordered as ``fp8_p`` leaves P's: in
  each block of 16 keys, position 4t + 2a + b holds key 8a + 2t + b."""
  *lead, n = x.shape
  x = x.reshape(*lead, n // 16, 2, 4, 2)
  return jnp.swapaxes(x, -3, -2).reshape(*lead, n)


def _key_of_position(p):
  """The key at position p of ``fp8_key_order`` (int32 array)."""
  t, a, b = (p % 16) // 4, (p % 4) // 2, p % 2
  return (p // 16) * 16 + 8 * a + 2 * t + b


def _transpose_kernel(v_ref, vt_ref):
  # v_ref [_KEYS, H] of one (batch, kv head), vt_ref [H, _KEYS]
  keys = _key_of_position(jnp.arange(_KEYS, dtype=jnp.int32))
  vt_ref[...] = v_ref[keys, :].T


def transpose_triton(v, interpret: bool = False):
  """``fp8_key_order(jnp.transpose(v, (0, 2, 3, 1)))`` of v [B, S, K, H]
  (S a multiple of 128) as a Pallas-Triton kernel: [B, K, H, S]."""
  b, s, k, h = v.shape
  if s % _KEYS:
    raise ValueError(f"v's length {s} is not a multiple of {_KEYS}")
  return pl.pallas_call(
      _transpose_kernel,
      grid=(b, k, s // _KEYS),
      in_specs=[pl.BlockSpec((None, _KEYS, None, h),
                             lambda bi, ki, si: (bi, si, ki, 0))],
      out_specs=pl.BlockSpec((None, None, h, _KEYS),
                             lambda bi, ki, si: (bi, ki, 0, si)),
      out_shape=jax.ShapeDtypeStruct((b, k, h, s), v.dtype),
      compiler_params=pl_triton.CompilerParams(num_warps=8, num_stages=1),
      interpret=interpret, name="pallas_flash_fp8_v_transpose")(v)


def transposed(v, interpret: bool):
  """V^T [B, K, H, S] in ``fp8_key_order`` of fp8 v [B, S, K, H]: the
  Triton kernel on a GPU at H = 128 (S in whole 128-key tiles, as the
  forward pads it), XLA's transpose otherwise: in interpret mode, and in a
  CUDA lowering on a machine without a GPU (Pallas-Triton's lowering reads
  the device's compute capability)."""
  if (not interpret and jax.default_backend() == "gpu"
      and v.shape[3] == 128 and v.shape[1] % _KEYS == 0):
    return transpose_triton(v)
  return fp8_key_order(jnp.transpose(v, (0, 2, 3, 1)))
