"""The static, hashable description of one attention call, as the kernels see it.

Backend contract: a forward backend is a function
``forward(q, k, v, arrays, params) -> (out, lse)`` with q [B, T, N, H],
k/v [B, S, K, H], ``arrays`` a ``masks.MaskArrays``, ``out`` [B, T, N, H] in
q.dtype and ``lse`` [B, N, T] float32 natural-log log-sum-exp with ``+inf``
for fully masked rows (so that exp(s - lse) = 0 there in the backward).
The optional ``arrays.bias`` and ALiBi slopes are added to the logits, and
dropout bits are drawn from ``arrays.dropout_seeds``, as in ``reference``.
A backward backend is
``backward(q, k, v, arrays, out, lse, d_out, params) -> (dq, dk, dv)``, plus
a float32 dbias partial ``[B, N, 1 | T, 1 | S]`` (not yet summed over the
bias's broadcast B / N dims) when ``params.bias_grad``.  It also takes an
optional keyword ``delta``: rowsum(dO * O) [B, N, T] float32 precomputed by
the caller (``row_delta``, before any dropout scaling), in which case ``out``
is not read (it may be None).
A backend that cannot take a valid input says so before it runs: its
``check_supported`` raises ``NotImplementedError``, and the dispatcher
(``_dispatch.plan``) passes to the next candidate.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

from pallas_flash import masks


@dataclasses.dataclass(frozen=True, kw_only=True)
class KernelParams:
  spec: masks.MaskSpec
  scale: float
  logits_soft_cap: float | None = None
  # The backends (``_dispatch.plan`` chooses both): "triton" | "mosaic" |
  # "decode" for the forward, "triton" | "mosaic" for the backward.
  forward: str = "triton"
  backward: str = "triton"
  config: Any = None  # backend config (e.g. config.TritonConfig); None = default
  interpret: bool = False  # run Pallas kernels in interpret mode (CPU)
  dropout_rate: float = 0.0  # attention dropout (``dropout.py``); 0 = none
  bias_grad: bool = False  # the backward also returns the dbias partial
  deterministic: bool = True  # False: the backward may sum in any order
  # How a sequence-sharded call runs under jit (sharding.py; the kernels
  # never read it): "ring" (ring.py), "ulysses" (ulysses.py) or "auto"
  # (``context_parallel=None``: ``ulysses.chosen`` picks per call).
  context_parallel: str = "auto"


def score_terms(arrays: masks.MaskArrays | None,
                dropout_rate: float) -> frozenset[str]:
  """The score terms of a call ("bias", "alibi", "dropout"): what a backend
  must take besides the masks (``_dispatch.py`` lists who takes which)."""
  terms = {"dropout"} if dropout_rate > 0.0 else set()
  if arrays is not None:
    terms |= {name for name, x in (("bias", arrays.bias),
                                   ("alibi", arrays.alibi_slopes))
              if x is not None}
  return frozenset(terms)


def row_delta(out, d_out):
  """delta_i = rowsum(dO_i * O_i) [B, N, T] float32 of out, d_out [B, T, N,
  H] (FlashAttention-2, Alg. 2 line 4): what a backward backend computes,
  or is given as ``delta=``."""
  return jnp.einsum("btnh,btnh->bnt", d_out.astype(jnp.float32),
                    out.astype(jnp.float32))
