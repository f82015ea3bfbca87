"""Public entry point: argument validation (the only place user input is
checked), normalisation to [B, T, N, H], and backend dispatch.

Letters: B batch, T query length, S key/value length, N query heads,
K key/value heads (N % K == 0, G = N // K), H head dim.
"""
from __future__ import annotations

import math
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np

from pallas_flash import dropout, masks, reference
from pallas_flash.decode import kernel as decode
from pallas_flash.params import KernelParams, score_terms

Implementation = Literal["xla", "triton", "mosaic"]
_IMPLEMENTATIONS = (None, "xla", "triton", "mosaic")
_DTYPES = (jnp.dtype(jnp.float16), jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float32))
MAX_HEAD_DIM = 256


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
):
  r"""Exact attention ``softmax(scale * q k^T + bias, masked) v`` without N x N memory.

  A drop-in for :func:`jax.nn.dot_product_attention` (same arguments, shapes
  and results), plus packed sequences, logits soft-capping, a bottom-right
  causal diagonal, ALiBi and attention dropout.

  Args:
    query: ``[B, T, N, H]`` or ``[T, N, H]``; float16, bfloat16 or float32.
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
      faster: head dim 64 without dropout (H200 run 213, issue 12's
      command: backward 1.14-1.22x cuDNN's against 1.02-1.13x
      deterministic).  At head dim 128 the deterministic kernels are the
      faster since run 246 (1.036 / 1.007x cuDNN's at S = 4k / 16k
      non-causal, against 0.993 / 0.991x), so the flag changes nothing
      there.  Other backends are deterministic either way;
      an explicit ``MosaicConfig(backward=...)`` overrides it.
    config: backend tuning (``pallas_flash.TritonConfig`` for ``"triton"``;
      a ``pallas_flash.decode.DecodeConfig`` with ``"triton"`` forces the
      split-KV decode kernel, which ``None`` picks on a GPU for T <= 64 query
      tokens against S >= 8 T keys without segment ids, a dense mask, a
      bias, ALiBi or dropout;
      ``pallas_flash.MosaicConfig`` for ``"mosaic"``, whose ``backward``
      field takes a ``pallas_flash.MosaicBackwardConfig``); ``None`` takes
      the measured per-head-dim default.

  Returns:
    ``out`` with the shape and dtype of ``query``; with
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
  q, k, v, arrays, spec, scale, cap, squeeze = _validate(
      query, key, value, bias, mask, scale, is_causal, query_seq_lengths,
      key_value_seq_lengths, local_window_size, implementation,
      causal_alignment, query_segment_ids, key_value_segment_ids,
      logits_soft_cap, deterministic)
  arrays, rate = _validate_score_terms(arrays, q.shape[0], q.shape[2],
                                       alibi_slopes, dropout_rate, dropout_rng,
                                       broadcast_dropout)
  out, lse = _dispatch(q, k, v, arrays, spec, scale, cap, rate,
                       implementation, config, deterministic)
  if squeeze:
    out, lse = out[0], lse[0]
  return (out, lse) if return_residual else out


def _on_gpu() -> bool:
  return jax.default_backend() == "gpu"


def _is_hopper() -> bool:
  try:
    cc = getattr(jax.devices()[0], "compute_capability", "")
    return str(cc).startswith("9")
  except Exception:  # pragma: no cover - exotic device objects
    return False


def _has_mosaic() -> bool:
  import importlib.util
  return importlib.util.find_spec("pallas_flash.mosaic.forward") is not None


def _dispatch(q, k, v, arrays, spec, scale, cap, rate, implementation,
              config, deterministic: bool = True):
  ref = lambda: reference.attention(q, k, v, arrays, spec=spec, scale=scale,
                                    logits_soft_cap=cap, dropout_rate=rate)
  if implementation == "xla":
    return ref()
  if implementation is None:
    if not _on_gpu():
      return ref()
    # Few query tokens against a long K/V (decoding): the split-KV kernel,
    # which takes no bias, ALiBi or dropout.
    terms = bool(score_terms(arrays, rate))
    candidates = ((["decode"] if decode.suits(q.shape[1], k.shape[1], spec,
                                              terms) else [])
                  + (["mosaic"] if _is_hopper() and _has_mosaic() else [])
                  + ["triton"])
  elif implementation == "triton" and isinstance(config, decode.DecodeConfig):
    candidates = ["decode"]  # forced split-KV kernel
  else:
    candidates = [implementation]
  for i, backend in enumerate(candidates):
    params = KernelParams(spec=spec, scale=scale, logits_soft_cap=cap,
                          forward=backend,
                          config=config if implementation is not None else None,
                          interpret=not _on_gpu(), dropout_rate=rate,
                          deterministic=deterministic)
    try:
      return _kernel_attention(params, q, k, v, arrays)
    except NotImplementedError:
      if implementation is not None:
        raise
  return ref()


def _kernel_attention(params, q, k, v, arrays):
  from pallas_flash import _vjp  # imports the kernels lazily

  _vjp.check_supported(params, q, k, v, arrays)
  out, lse = _vjp.flash(params, q, k, v, arrays)
  lse = jnp.where(jnp.isinf(lse), masks.MASKED_LSE, lse)
  return out, jax.lax.stop_gradient(jnp.transpose(lse, (0, 2, 1)))


def _validate(query, key, value, bias, mask, scale, is_causal, q_lengths,
              kv_lengths, window, implementation, causal_alignment, q_seg,
              kv_seg, cap, deterministic=True):
  if not isinstance(deterministic, bool):
    raise ValueError(f"deterministic={deterministic!r} must be a bool")
  if implementation not in _IMPLEMENTATIONS:
    raise ValueError(f"implementation={implementation!r} must be one of "
                     f"{_IMPLEMENTATIONS}")
  if causal_alignment not in ("top_left", "bottom_right"):
    raise ValueError(f"causal_alignment={causal_alignment!r} must be "
                     "'top_left' or 'bottom_right'")
  q, k, v = (jnp.asarray(x) for x in (query, key, value))
  if q.ndim not in (3, 4):
    raise ValueError(f"query must be [B, T, N, H] or [T, N, H], got shape {q.shape}")
  if k.ndim != q.ndim or v.ndim != q.ndim:
    raise ValueError(f"query, key and value must have the same rank, got "
                     f"query {q.shape}, key {k.shape}, value {v.shape}")
  squeeze = q.ndim == 3
  if squeeze:
    q, k, v = q[None], k[None], v[None]
  b, t, n, h = q.shape
  _, s, kh, _ = k.shape
  if k.shape[0] != b:
    raise ValueError(f"batch of key {k.shape} does not match query {q.shape}")
  if v.shape != k.shape:
    raise ValueError(f"value shape {v.shape} must equal key shape {k.shape}")
  if k.shape[-1] != h:
    raise ValueError(f"head_dim of key ({k.shape[-1]}) must equal head_dim of "
                     f"query ({h})")
  if q.dtype not in _DTYPES:
    raise ValueError(f"query dtype {q.dtype} must be float16, bfloat16 or float32")
  if k.dtype != q.dtype or v.dtype != q.dtype:
    raise ValueError(f"query, key and value dtypes must match, got {q.dtype}, "
                     f"{k.dtype}, {v.dtype}")
  if h > MAX_HEAD_DIM or h < 1:
    raise ValueError(f"head_dim={h} must be in [1, {MAX_HEAD_DIM}]")
  if kh < 1 or n % kh:
    raise ValueError(f"num_heads={n} must be a multiple of num_kv_heads={kh}")
  if t < 1 or s < 1:
    raise ValueError(f"sequence lengths must be >= 1, got T={t}, S={s}")

  if scale is None:
    scale = 1.0 / math.sqrt(h)
  elif not isinstance(scale, (int, float, np.floating, np.integer)) or not math.isfinite(scale):
    raise ValueError(f"scale={scale!r} must be a finite Python float or None")
  if cap is not None:
    if not isinstance(cap, (int, float, np.floating, np.integer)) or not cap > 0:
      raise ValueError(f"logits_soft_cap={cap!r} must be a positive float or None")
    cap = float(cap)

  if window is not None:
    if isinstance(window, (int, np.integer)):
      window = (int(window), int(window))
    if (not isinstance(window, (tuple, list)) or len(window) != 2
        or not all(isinstance(w, (int, np.integer)) and w >= 0 for w in window)):
      raise ValueError(f"local_window_size={window!r} must be an int >= 0 or "
                       "a pair (left, right) of ints >= 0")
    window = (int(window[0]), int(window[1]))

  def lengths(x, name, full):
    if x is None:
      return jnp.full((b,), full, jnp.int32)
    x = jnp.asarray(x)
    if x.shape != (b,) or not jnp.issubdtype(x.dtype, jnp.integer):
      raise ValueError(f"{name} must be an int array of shape ({b},), got "
                       f"{x.dtype}{list(x.shape)}")
    return x.astype(jnp.int32)

  q_len = lengths(q_lengths, "query_seq_lengths", t)
  kv_len = lengths(kv_lengths, "key_value_seq_lengths", s)

  def segments(x, name, length):
    x = jnp.asarray(x)
    if squeeze and x.ndim == 1:
      x = x[None]
    if x.shape != (b, length) or not jnp.issubdtype(x.dtype, jnp.integer):
      raise ValueError(f"{name} must be an int array of shape ({b}, {length}), "
                       f"got {x.dtype}{list(x.shape)}")
    return x.astype(jnp.int32)

  if q_seg is None and kv_seg is not None:
    raise ValueError("key_value_segment_ids given without query_segment_ids")
  if q_seg is not None:
    if kv_seg is None:
      if t != s:
        raise ValueError(f"key_value_segment_ids is required when T={t} != S={s}")
      kv_seg = q_seg
    q_seg = segments(q_seg, "query_segment_ids", t)
    kv_seg = segments(kv_seg, "key_value_segment_ids", s)

  full = (b, n, t, s)

  def broadcastable(x, name, is_bool):
    x = jnp.asarray(x)
    if is_bool and x.dtype != jnp.bool_:
      raise ValueError(f"{name} must be boolean (True = attend), got {x.dtype}; "
                       "pass additive masks as bias")
    if not is_bool and not jnp.issubdtype(x.dtype, jnp.floating):
      raise ValueError(f"{name} must be a float array, got {x.dtype}")
    if x.ndim > 4 or any(d not in (1, f) for d, f in
                         zip((1,) * (4 - x.ndim) + x.shape, full)):
      raise ValueError(f"{name} of shape {x.shape} does not broadcast to "
                       f"[B, N, T, S] = {list(full)}")
    return x.reshape((1,) * (4 - x.ndim) + x.shape)

  if mask is not None:
    mask = broadcastable(mask, "mask", True)
  if bias is not None:
    bias = broadcastable(bias, "bias", False)

  spec = masks.MaskSpec(
      is_causal=bool(is_causal), bottom_right=causal_alignment == "bottom_right",
      window=window, has_segments=q_seg is not None,
      dense_mask_shape=None if mask is None else tuple(mask.shape))
  arrays = masks.MaskArrays(q_len, kv_len, q_seg, kv_seg, mask, bias)
  return q, k, v, arrays, spec, float(scale), cap, squeeze


def _validate_score_terms(arrays, b, n, slopes, rate, rng, broadcast):
  """ALiBi slopes -> float32 [1 | B, N]; dropout -> int32 [B, N] seeds."""
  if slopes is not None:
    slopes = jnp.asarray(slopes)
    if slopes.shape not in ((n,), (b, n)) or slopes.dtype != jnp.float32:
      raise ValueError(f"alibi_slopes must be float32 [N] or [B, N] = {[n]} "
                       f"or {[b, n]}, got {slopes.dtype}{list(slopes.shape)}")
    slopes = jax.lax.stop_gradient(slopes.reshape(-1, n))
  if (not isinstance(rate, (int, float, np.floating, np.integer))
      or not 0.0 <= rate < 1.0):
    raise ValueError(f"dropout_rate={rate!r} must be a float in [0, 1)")
  rate = float(rate)
  seeds = None
  if rate > 0.0:
    if rng is None:
      raise ValueError(f"dropout_rng is required when dropout_rate={rate}")
    rng = jnp.asarray(rng) if not isinstance(rng, jax.Array) else rng
    is_key = jnp.issubdtype(rng.dtype, jax.dtypes.prng_key) and rng.shape == ()
    is_raw = rng.dtype == jnp.uint32 and rng.shape == (2,)
    if not (is_key or is_raw):
      raise ValueError(f"dropout_rng must be a JAX PRNG key (jax.random.key "
                       f"or PRNGKey), got {rng.dtype}{list(rng.shape)}")
    seeds = dropout.seeds(rng, b, n, broadcast=bool(broadcast))
  return arrays._replace(alibi_slopes=slopes, dropout_seeds=seeds), rate
