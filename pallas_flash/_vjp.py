"""custom_vjp wiring of the kernel path (FlashAttention-2, Alg. 1 forward and
Alg. 2 backward).  Residuals are q, k, v, out and lse only: O(N) memory; the
backward recomputes the score tiles from the saved lse.  The backward runs
on the forward's backend where that backend has one for the input (Mosaic
GPU on Hopper), else on the Pallas-Triton kernels.  Both backend calls go
through ``sharding.py``, which partitions them per shard under jit.
"""
from __future__ import annotations

import functools

import jax

from pallas_flash import masks, sharding
from pallas_flash.params import KernelParams
from pallas_flash.triton import backward as triton_backward
from pallas_flash.triton import forward as triton_forward


def _forward_impl(params: KernelParams):
  if params.forward == "triton":
    return triton_forward.forward
  if params.forward == "mosaic":
    from pallas_flash.mosaic import forward as mosaic_forward  # Hopper only
    return mosaic_forward.forward
  if params.forward == "decode":  # split-KV; its backward is the Triton one
    from pallas_flash.decode import kernel as decode_kernel
    return decode_kernel.forward
  raise ValueError(f"unknown forward backend {params.forward!r}")


def check_supported(params: KernelParams, q, k, v, bias):
  """Raises NotImplementedError if the kernels cannot take this input."""
  if bias is not None:
    raise NotImplementedError(
        "bias is supported on implementation='xla' only; the kernels take "
        "boolean masks (mask=, lengths, segment ids, window, causal)")
  if params.forward == "mosaic":
    from pallas_flash.mosaic import forward as mosaic_forward
    mosaic_forward.check_supported(params, q, k, v)
  if params.forward == "decode":
    from pallas_flash.decode import kernel as decode_kernel
    decode_kernel.check_supported(params, q, k)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def flash(params: KernelParams, q, k, v, arrays: masks.MaskArrays):
  """Returns (out [B, T, N, H], lse [B, N, T] f32, +inf on fully masked rows)."""
  return sharding.forward(_forward_impl(params), q, k, v, arrays, params)


def _flash_fwd(params, q, k, v, arrays):
  out, lse = sharding.forward(_forward_impl(params), q, k, v, arrays, params)
  return (out, lse), (q, k, v, arrays, out, lse)


def _backward_impl(params: KernelParams, q, k, v):
  if params.forward == "mosaic":
    from pallas_flash.mosaic import backward as mosaic_backward  # Hopper only
    try:
      mosaic_backward.check_supported(params, q, k, v)
      return mosaic_backward.backward
    except NotImplementedError:  # e.g. head_dim > 128
      pass
  return triton_backward.backward


def _flash_bwd(params, residuals, cotangents):
  q, k, v, arrays, out, lse = residuals
  d_out, _ = cotangents  # lse is returned under stop_gradient, as in jax.nn
  dq, dk, dv = sharding.backward(_backward_impl(params, q, k, v), q, k, v,
                                 arrays, out, lse, d_out, params)
  return dq, dk, dv, None


flash.defvjp(_flash_fwd, _flash_bwd)
