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

from pallas_flash import _dispatch, masks, reference, sharding
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


# --- fp8 forward --------------------------------------------------------------

@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class Fp8Call:
  """The static part of an fp8 call: the kernel's params (``_dispatch.plan``)
  or None for the reference on the dequantized inputs, whose options are
  the rest."""
  params: KernelParams | None
  spec: masks.MaskSpec
  scale: float
  cap: float | None
  rate: float


def dequantize(q, k, v, descales):
  """The real values of fp8 q [B, T, N, H], k, v [B, S, K, H] in float32:
  ``x.astype(f32) * descale``, descales [B, K] (query head n: kv head
  n // G)."""
  group = q.shape[2] // k.shape[2]
  real = lambda x, d, g: x.astype(jnp.float32) * jnp.repeat(
      d, g, axis=1)[:, None, :, None]
  q_d, k_d, v_d = descales
  return real(q, q_d, group), real(k, k_d, 1), real(v, v_d, 1)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def flash_fp8(call: Fp8Call, q, k, v, descales, arrays: masks.MaskArrays):
  """The fp8 forward (float8_e4m3fn q, k, v; descales [B, K] each): out
  [B, T, N, H] bfloat16 and lse [B, T, N] float32 (``masks.MASKED_LSE`` on
  fully masked rows), from the Mosaic kernel (``call.params``) or the f32
  reference on the dequantized inputs.

  Not differentiable: the gradient w.r.t. an fp8 input would have to be
  rounded to e4m3 (JAX gives a cotangent its primal's dtype), so any
  derivative through this call raises ``ValueError`` (``_flash_fp8_fwd``)
  instead of returning it silently rounded.  Train through the bf16 path.
  Under jit the kernel call is partitioned per shard over the batch and
  kv heads (``sharding.forward`` splits the descales with them); a
  sequence split is gathered (no fp8 ring)."""
  if call.params is None:
    qf, kf, vf = dequantize(q, k, v, descales)
    out, lse = reference.attention(qf, kf, vf, arrays, spec=call.spec,
                                   scale=call.scale,
                                   logits_soft_cap=call.cap,
                                   dropout_rate=call.rate)
    return out.astype(jnp.bfloat16), lse
  q_d, k_d, v_d = descales
  out, lse = sharding.forward(_dispatch.forward_fn(call.params), q, k, v,
                              arrays, call.params, descales=(q_d * k_d, v_d))
  lse = jnp.where(jnp.isinf(lse), masks.MASKED_LSE, lse)
  return out, jnp.transpose(lse, (0, 2, 1))


def _flash_fp8_fwd(call, q, k, v, descales, arrays):
  perturbed = [name for name, x in (("query", q), ("key", k), ("value", v),
                                    ("descales", descales)) if any(
      leaf.perturbed for leaf in jax.tree.leaves(
          x, is_leaf=lambda y: isinstance(y, CustomVJPPrimal)))]
  if perturbed:
    raise ValueError(
        f"flash_attention with float8_e4m3fn inputs is forward only: "
        f"differentiating w.r.t. {', '.join(perturbed)} is not supported (an "
        "fp8 input's gradient would be rounded to e4m3); differentiate a "
        "bfloat16 call instead")
  q, k, v, descales, arrays = jax.tree.map(
      lambda x: x.value, (q, k, v, descales, arrays),
      is_leaf=lambda x: isinstance(x, CustomVJPPrimal))
  return flash_fp8(call, q, k, v, descales, arrays), None


def _flash_fp8_bwd(call, residuals, cotangents):
  del call, residuals, cotangents  # only reached with nothing perturbed
  return None, None, None, None, None


flash_fp8.defvjp(_flash_fp8_fwd, _flash_fp8_bwd, symbolic_zeros=True)
