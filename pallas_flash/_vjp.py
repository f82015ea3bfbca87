"""custom_vjp wiring of the kernel path (FlashAttention-2, Alg. 1 forward and
Alg. 2 backward).  Residuals are q, k, v, out and lse only (plus the optional
bias, ALiBi slopes and dropout seeds the caller passed): O(N) memory; the
backward recomputes the score tiles from the saved lse and regenerates the
dropout bits.  The backward runs on the forward's backend where that backend
has one for the input (Mosaic GPU on Hopper), else on the Pallas-Triton
kernels.  Both backend calls go through ``sharding.py``, which partitions
them per shard under jit.

dbias is computed only when the bias is perturbed (``symbolic_zeros=True``
tells the forward rule whether the bias carries a tangent): a closed-over or
``stop_gradient``-ed bias costs no dbias work.
"""
from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.custom_derivatives import CustomVJPPrimal, SymbolicZero

from pallas_flash import masks, sharding
from pallas_flash.params import KernelParams, score_terms
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


# The score terms each forward backend takes; the Triton kernels take all.
_TAKES = {"mosaic": frozenset({"alibi", "dropout"}), "decode": frozenset()}


def check_supported(params: KernelParams, q, k, v, arrays: masks.MaskArrays):
  """Raises NotImplementedError if the kernels cannot take this input."""
  terms = score_terms(arrays, params.dropout_rate)
  missing = terms - _TAKES.get(params.forward, terms)
  if missing:
    raise NotImplementedError(
        f"the {params.forward} kernels take no {' / '.join(sorted(missing))} "
        "yet (the dispatcher falls back to triton)")
  if params.forward == "mosaic":
    from pallas_flash.mosaic import forward as mosaic_forward
    mosaic_forward.check_supported(params, q, k, v, arrays)
  if params.forward == "decode":
    from pallas_flash.decode import kernel as decode_kernel
    decode_kernel.check_supported(params, q, k)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def flash(params: KernelParams, q, k, v, arrays: masks.MaskArrays):
  """Returns (out [B, T, N, H], lse [B, N, T] f32, +inf on fully masked rows)."""
  return sharding.forward(_forward_impl(params), q, k, v, arrays, params)


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class _Static:
  """The backward's params, carried in the residuals (no leaves)."""
  params: KernelParams


def _flash_fwd(params, q, k, v, arrays):
  # symbolic_zeros=True: every primal leaf is a CustomVJPPrimal.
  bias_grad = arrays.bias is not None and arrays.bias.perturbed
  q, k, v, arrays = jax.tree.map(
      lambda x: x.value, (q, k, v, arrays),
      is_leaf=lambda x: isinstance(x, CustomVJPPrimal))
  out, lse = sharding.forward(_forward_impl(params), q, k, v, arrays, params)
  bwd_params = dataclasses.replace(params, bias_grad=bias_grad)
  return (out, lse), (_Static(bwd_params), q, k, v, arrays, out, lse)


def _backward_impl(params: KernelParams, q, k, v, arrays=None):
  if (params.forward == "mosaic"
      and score_terms(arrays, params.dropout_rate) <= _TAKES["mosaic"]):
    from pallas_flash.mosaic import backward as mosaic_backward  # Hopper only
    try:
      mosaic_backward.check_supported(params, q, k, v, arrays)
      return mosaic_backward.backward
    except NotImplementedError:  # e.g. head_dim > 128
      pass
  return triton_backward.backward


def _flash_bwd(params, residuals, cotangents):
  static, q, k, v, arrays, out, lse = residuals
  params = static.params
  d_out, _ = cotangents  # lse is returned under stop_gradient, as in jax.nn
  if isinstance(d_out, SymbolicZero):
    d_out = jnp.zeros(d_out.shape, d_out.dtype)
  grads = sharding.backward(_backward_impl(params, q, k, v, arrays), q, k, v,
                            arrays, out, lse, d_out, params)
  d_arrays = None
  if params.bias_grad:
    # Sum the partial over the bias's broadcast dims (deterministic XLA sums).
    bias, partial = arrays.bias, grads[3]
    dims = tuple(d for d in range(4) if bias.shape[d] == 1 != partial.shape[d])
    dbias = partial if not dims else jnp.sum(
        partial, axis=dims, keepdims=True, dtype=jnp.float32)
    dbias = dbias.astype(bias.dtype)
    d_arrays = masks.MaskArrays(*(None,) * len(arrays))._replace(bias=dbias)
  return (*grads[:3], d_arrays)


flash.defvjp(_flash_fwd, _flash_bwd, symbolic_zeros=True)
