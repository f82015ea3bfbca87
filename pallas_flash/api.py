"""Public entry point: validates the call once (``_dispatch.validate``, the
only place user input is checked, normalising to [B, T, N, H]), asks
``_dispatch.plan`` for its backends and runs them (``_vjp.flash``) or the
float32 reference.

Letters: B batch, T query length, S key/value length, N query heads,
K key/value heads (N % K == 0, G = N // K), H head dim.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from pallas_flash import _dispatch, _vjp, masks, reference

Implementation = _dispatch.Implementation


def flash_attention(
    query,
    key,
    value,
    bias=None,
    mask=None,
    *,
    scale: float | None = None,
    is_causal: bool = False,
    query_seq_lengths=None,
    key_value_seq_lengths=None,
    local_window_size: int | tuple[int, int] | None = None,
    implementation: Implementation | None = None,
    return_residual: bool = False,
    causal_alignment: masks.CausalAlignment = "top_left",
    query_segment_ids=None,
    key_value_segment_ids=None,
    logits_soft_cap: float | None = None,
    config: Any = None,
    alibi_slopes=None,
    dropout_rate: float = 0.0,
    dropout_rng=None,
    broadcast_dropout: bool = False,
    deterministic: bool = True,
    q_descale=None,
    k_descale=None,
    v_descale=None,
    context_parallel: _dispatch.ContextParallel | None = None,
):
  r"""Exact attention ``softmax(scale * q k^T + bias, masked) v`` without N x N memory.

  A drop-in for :func:`jax.nn.dot_product_attention` (same arguments, shapes
  and results), plus packed sequences, logits soft-capping, a bottom-right
  causal diagonal, ALiBi, attention dropout and an FP8 (e4m3) forward.

  Args:
    query: ``[B, T, N, H]`` or ``[T, N, H]``; float16, bfloat16 or float32;
      or float8_e4m3fn (with key and value; see ``q_descale``).
    key: ``[B, S, K, H]`` or ``[S, K, H]``, same dtype and H as ``query``.
      ``N`` must be a multiple of ``K``: query head ``n`` reads kv head
      ``n // (N // K)`` (GQA; MQA when K == 1).  E.g. N=8, K=2: query heads
      0-3 read kv head 0, heads 4-7 read kv head 1.
    value: same shape and dtype as ``key``.
    bias: optional float additive bias broadcastable to ``[B, N, T, S]``
      (e.g. ``[1, N, T, S]``, ``[B, 1, 1, S]``, ``[N, T, S]``), added after
      scaling and soft-capping; ``-inf`` entries mask their logit.  The
      kernels read it tile by tile, never broadcast in memory.  Its gradient
      has the bias's own shape (summed over broadcast dims) and is computed
      only when asked for (not for a constant or ``stop_gradient`` bias).
    mask: optional boolean mask broadcastable to ``[B, N, T, S]`` (True =
      attend).  The kernels read it tile by tile; it is never turned into a
      float bias.
    scale: logit scale; ``None`` means ``1 / sqrt(H)``.
    is_causal: causal masking, aligned per ``causal_alignment``.
    query_seq_lengths: int32 ``[B]``; rows ``>= length`` are padding and
      output zeros.
    key_value_seq_lengths: int32 ``[B]``; keys ``>= length`` are ignored.
    local_window_size: ``w`` or ``(left, right)``: query ``i`` sees keys
      ``i + offset - left ... i + offset + right``.
    implementation: ``None`` picks the fastest path that supports the input
      on the current device (``"xla"`` on CPU); ``"triton"`` forces the
      Pallas-Triton kernels (Pallas interpret mode on a CPU-only machine);
      ``"mosaic"`` the Hopper Mosaic GPU kernels (forward and backward;
      the Pallas-Triton ones where they cannot take the input); ``"xla"`` the
      float32 reference.
    return_residual: also return the log-sum-exp ``[B, T, N]`` (float32,
      under ``stop_gradient`` as in jax.nn).
    causal_alignment: ``"top_left"`` (jax.nn's: query ``i`` sees keys
      ``j <= i``) or ``"bottom_right"`` (flash-attn's: ``j <= i + S - T``,
      per batch ``kv_len - q_len`` when lengths are given).  Also aligns the
      local window.  For T=2, S=5 (``1`` = attend)::

          top_left        bottom_right
          1 0 0 0 0       1 1 1 1 0
          1 1 0 0 0       1 1 1 1 1

    query_segment_ids: int ``[B, T]`` packed-sequence ids; a token attends
      only to keys of the same id; negative ids mark padding tokens.
    key_value_segment_ids: int ``[B, S]``; defaults to ``query_segment_ids``
      when T == S.
    logits_soft_cap: ``cap``: logits become ``cap * tanh(logits / cap)``.
    alibi_slopes: optional float32 ``[N]`` or ``[B, N]``: ALiBi, the bias
      ``-slope[n] * |i + offset - j|`` computed in the kernel (flash-attn's
      definition; ``offset`` is the causal diagonal's, see
      ``causal_alignment``).  No gradient flows to the slopes.
    dropout_rate: attention dropout in [0, 1): each probability is kept with
      probability ``1 - dropout_rate`` and scaled by ``1 / (1 - rate)``;
      ``pallas_flash.dropout_mask`` returns the keep mask used.  The bits come
      from a hash of (key, batch, head, query, key position), the same on
      every backend and tile size; the backward regenerates them.
    dropout_rng: a JAX PRNG key, required when ``dropout_rate > 0``.
    broadcast_dropout: one keep mask for every batch row and head (Flax's
      ``broadcast_dropout``).
    deterministic: ``True`` (default): the gradients are the same bits on
      every run.  ``False`` lets the Mosaic (Hopper) backward add dQ in
      whatever order its CTAs finish (f32 TMA reduce-add), where that is
      faster: head dim 64 without dropout (H200, 2026-11-25: backward
      1.14-1.22x cuDNN's against 1.02-1.13x deterministic).  At head dim
      128 the deterministic kernels are the faster (1.036 / 1.007x cuDNN's
      at S = 4k / 16k non-causal, against 0.993 / 0.991x), so the flag
      changes nothing there.  Other backends are deterministic either way;
      an explicit ``MosaicConfig(backward=...)`` overrides it.
    q_descale, k_descale, v_descale: with float8_e4m3fn query, key and value
      only: float32 scale factors (> 0), a scalar or broadcastable to
      ``[B, K]`` (batch, kv heads; query head ``n`` takes kv head
      ``n // (N // K)``'s), flash-attn 3's names: the real values are
      ``x.astype(float32) * x_descale``.  ``None`` means 1.  The output is
      bfloat16.  On a Hopper GPU the Mosaic kernel runs both GEMMs in fp8
      (P rounded to e4m3, f32 accumulators); with ALiBi, dropout or a bias,
      or elsewhere, the float32 reference on the dequantized values runs.
      Forward only: differentiating w.r.t. fp8 inputs or descales raises
      ``ValueError``.  A descale that is not finite and > 0 raises
      ``ValueError`` when concrete; traced, it makes the output NaN.
    config: backend tuning (``pallas_flash.TritonConfig`` for ``"triton"``;
      a ``pallas_flash.decode.DecodeConfig`` with ``"triton"`` forces the
      split-KV decode kernel, which ``None`` picks on a GPU for T <= 64 query
      tokens against S >= 8 T keys without segment ids, a dense mask, a
      bias, ALiBi or dropout;
      ``pallas_flash.MosaicConfig`` for ``"mosaic"``, whose ``backward``
      field takes a ``pallas_flash.MosaicBackwardConfig``); ``None`` takes
      the measured per-head-dim default.
    context_parallel: how the kernels run under ``jax.jit`` where q, k and
      v are sharded over the sequence (T == S, rows over the same mesh
      axes; docs/sharding.md): ``"ring"`` (ring attention: K/V shares
      travel by collective-permutes, any head count) or ``"ulysses"``
      (DeepSpeed-Ulysses: all-to-alls give each device the whole sequence
      of N / P heads; where the local query heads do not split over the
      sequence's P devices, the ring runs).  ``None``: the library's
      choice: Ulysses where the local query heads split over the
      sequence's devices and the program runs in one JAX process
      (``jax.process_count() == 1``), else the ring (``ulysses.chosen``;
      Ulysses won every cell measured under ``jit`` on 2 and 4 H100s,
      2026-11-28).  Ignored elsewhere (no sequence sharding,
      ``implementation="xla"``, bias, ALiBi or dropout).

  Returns:
    ``out`` with the shape and dtype of ``query`` (bfloat16 for fp8); with
    ``return_residual=True``, ``(out, lse)``.  A query row that sees no key
    (fully masked) outputs zeros and lse ``-0.7 * float32.max`` (finite);
    unlike jax.nn, which averages V over such a row unless its length masks
    it, this never mixes in masked values.

  Raises:
    ValueError: for malformed input (ranks, shapes, dtypes, head dims > 256,
      heads not divisible, masks that do not broadcast, bad options).
    NotImplementedError: when the chosen ``implementation`` cannot take a
      valid input (``implementation=None`` then falls back).
  """
  q, k, v, arrays, spec, scale, cap, squeeze = _dispatch.validate(
      query, key, value, bias, mask, scale, is_causal, query_seq_lengths,
      key_value_seq_lengths, local_window_size, implementation,
      causal_alignment, query_segment_ids, key_value_segment_ids,
      logits_soft_cap, deterministic, fp8=True,
      context_parallel=context_parallel)
  descales = _dispatch.validate_descales(q, k,
                                         (q_descale, k_descale, v_descale))
  arrays, rate = _dispatch.validate_score_terms(
      arrays, q.shape[0], q.shape[2], alibi_slopes, dropout_rate, dropout_rng,
      broadcast_dropout)
  params = _dispatch.plan(q, k, v, arrays, spec, scale, cap, rate,
                          implementation, config, deterministic,
                          context_parallel=context_parallel)
  if descales is not None:  # fp8: forward only (_vjp.flash_fp8)
    call = _vjp.Fp8Call(params, spec, scale, cap, rate)
    out, lse = _vjp.flash_fp8(call, q, k, v, descales, arrays)
    lse = jax.lax.stop_gradient(lse)
  elif params is None:
    out, lse = reference.attention(q, k, v, arrays, spec=spec, scale=scale,
                                   logits_soft_cap=cap, dropout_rate=rate)
  else:
    out, lse = _vjp.flash(params, q, k, v, arrays)
    lse = jnp.where(jnp.isinf(lse), masks.MASKED_LSE, lse)
    lse = jax.lax.stop_gradient(jnp.transpose(lse, (0, 2, 1)))
  if squeeze:
    out, lse = out[0], lse[0]
  return (out, lse) if return_residual else out
