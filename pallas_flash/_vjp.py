"""custom_vjp wiring of the kernel path (FlashAttention-2, Alg. 1 forward and
Alg. 2 backward).  Residuals are q, k, v, out and lse only (plus the optional
bias, ALiBi slopes and dropout seeds the caller passed): O(N) memory; the
backward recomputes the score tiles from the saved lse and regenerates the
dropout bits.  The forward and the backward run on the backends that
``params`` names (``_dispatch.plan`` chose both).  Both backend calls go
through ``sharding.py``, which partitions them per shard under jit.

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

from pallas_flash import _dispatch, masks, sharding
from pallas_flash.params import KernelParams


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def flash(params: KernelParams, q, k, v, arrays: masks.MaskArrays):
  """Returns (out [B, T, N, H], lse [B, N, T] f32, +inf on fully masked rows)."""
  return sharding.forward(_dispatch.forward_fn(params), q, k, v, arrays, params)


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
  out, lse = sharding.forward(_dispatch.forward_fn(params), q, k, v, arrays,
                              params)
  bwd_params = dataclasses.replace(params, bias_grad=bias_grad)
  return (out, lse), (_Static(bwd_params), q, k, v, arrays, out, lse)


def _flash_bwd(params, residuals, cotangents):
  static, q, k, v, arrays, out, lse = residuals
  params = static.params
  d_out, _ = cotangents  # lse is returned under stop_gradient, as in jax.nn
  if isinstance(d_out, SymbolicZero):
    d_out = jnp.zeros(d_out.shape, d_out.dtype)
  grads = sharding.backward(_dispatch.backward_fn(params), q, k, v, arrays,
                            out, lse, d_out, params)
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
