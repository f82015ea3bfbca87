"""Between the public functions and the kernels: what more than one module
needs, in one place (api.py, ring.py and decode/cache.py import it; it imports
none of them).

* Device queries: ``on_gpu``, ``is_hopper``, ``has_mosaic``.
* Validation of user input (``validate``, ``validate_score_terms``,
  ``validate_descales``): the only place it is checked; ``ValueError`` with
  the values for malformed input.
* The choice of backends (``plan``): from the validated input and the device,
  once per call, the forward's and the backward's, carried in the
  ``KernelParams``; ``forward_fn`` / ``backward_fn`` return the functions
  they name (the backend contract in params.py), for _vjp.py and ring.py.

The Mosaic GPU modules are imported only when a Mosaic backend is asked for:
they serve Hopper alone.

Letters: B batch, T query length, S key/value length, N query heads,
K key/value heads (N % K == 0, G = N // K), H head dim.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import math
import typing
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np

from pallas_flash import dropout, masks
from pallas_flash.decode import kernel as decode_kernel
from pallas_flash.params import KernelParams, score_terms
from pallas_flash.triton import backward as triton_backward
from pallas_flash.triton import forward as triton_forward

Implementation = Literal["xla", "triton", "mosaic"]
IMPLEMENTATIONS = (None, *typing.get_args(Implementation))
ContextParallel = Literal["ring", "ulysses"]
CONTEXT_PARALLEL = (None, *typing.get_args(ContextParallel))
DTYPES = (jnp.dtype(jnp.float16), jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float32))
FP8 = jnp.dtype(jnp.float8_e4m3fn)  # flash_attention's fp8 forward only
MAX_HEAD_DIM = 256


# --- device -------------------------------------------------------------------

def on_gpu() -> bool:
  return jax.default_backend() == "gpu"


def is_hopper() -> bool:
  try:
    cc = getattr(jax.devices()[0], "compute_capability", "")
    return str(cc).startswith("9")
  except Exception:  # pragma: no cover - exotic device objects
    return False


def has_mosaic() -> bool:
  return importlib.util.find_spec("pallas_flash.mosaic.forward") is not None


# --- backends -----------------------------------------------------------------

# The score terms each forward backend takes (the Mosaic backward those of
# its forward); the Triton kernels take all.  (The Mosaic kernels' checks
# refuse the biases their rings cannot read: float32, or broadcast along
# queries or keys; the Mosaic backward also one at head_dim > 128, where its
# split_head_dim form has no room for the ring.)
_TAKES = {"mosaic": frozenset({"alibi", "bias", "dropout"}),
          "decode": frozenset()}


def plan(q, k, v, arrays: masks.MaskArrays | None, spec: masks.MaskSpec,
         scale: float, cap: float | None, rate: float, implementation,
         config, deterministic: bool = True, *,
         ring: bool = False,
         context_parallel: ContextParallel | None = None
         ) -> KernelParams | None:
  """The backends of a validated call, chosen once: its ``KernelParams``
  with the ``forward`` and ``backward`` backend, or None for the float32
  reference (``reference.attention``).

  ``implementation=None``: on a CPU the reference; on a GPU the first
  candidate whose check takes the input, of: the split-KV decode kernel
  where it suits the shapes (``decode.kernel.suits``), Mosaic GPU on a
  Hopper, Pallas-Triton; the reference if none does.  An explicit
  implementation is the only candidate (``"triton"`` with a
  ``DecodeConfig``: the decode kernel) and its ``NotImplementedError``
  propagates.  The backward runs on Mosaic GPU where the forward does and
  the Mosaic backward takes the input, else on Pallas-Triton.

  ``ring=True`` chooses for ring attention's blocks (``arrays`` None): a
  kernel with a block backward on any device (interpret mode on a CPU),
  Mosaic GPU on a Hopper, else Pallas-Triton; never the decode kernel;
  ``NotImplementedError`` where none takes the input.

  ``context_parallel`` (validated): how sharding.py runs the call where q
  and k/v are sharded over the sequence; None: ``"auto"`` (Ulysses where
  ``ulysses.chosen`` says so, else the ring).
  """
  if implementation == "xla":
    return None
  if implementation is None:
    if not ring and not on_gpu():
      return None
    # Few query tokens against a long K/V (decoding): the split-KV kernel,
    # which takes no bias, ALiBi or dropout.
    decode = not ring and decode_kernel.suits(
        q.shape[1], k.shape[1], spec, bool(score_terms(arrays, rate)))
    candidates = ((["decode"] if decode else [])
                  + (["mosaic"] if is_hopper() and has_mosaic() else [])
                  + ["triton"])
  elif (not ring and implementation == "triton"
        and isinstance(config, decode_kernel.DecodeConfig)):
    candidates = ["decode"]  # forced split-KV kernel
  else:
    candidates = [implementation]
  for backend in candidates:
    params = KernelParams(spec=spec, scale=scale, logits_soft_cap=cap,
                          forward=backend,
                          config=config if implementation is not None else None,
                          interpret=not on_gpu(), dropout_rate=rate,
                          deterministic=deterministic,
                          context_parallel=context_parallel or "auto")
    try:
      _check_supported(params, q, k, v, arrays)
    except NotImplementedError:
      if implementation is not None:
        raise
      continue
    return dataclasses.replace(
        params, backward=_backward(params, q, k, v, arrays))
  if ring:
    raise NotImplementedError("no kernel backend takes this input")
  return None


def _check_supported(params: KernelParams, q, k, v,
                     arrays: masks.MaskArrays | None):
  """Raises NotImplementedError if the forward backend cannot take this
  input."""
  if jnp.dtype(q.dtype) == FP8 and params.forward != "mosaic":
    raise NotImplementedError(
        f"the {params.forward} kernels take no float8_e4m3fn input (the "
        "dispatcher falls back to the reference on dequantized inputs)")
  terms = score_terms(arrays, params.dropout_rate)
  missing = terms - _TAKES.get(params.forward, terms)
  if missing:
    raise NotImplementedError(
        f"the {params.forward} kernels take no {' / '.join(sorted(missing))} "
        "yet (the dispatcher falls back to triton)")
  if params.forward == "mosaic":
    if not params.interpret and not is_hopper():
      raise NotImplementedError(
          "the mosaic kernels need a Hopper GPU (sm_90), got "
          f"{jax.devices()[0].device_kind}")
    from pallas_flash.mosaic import forward as mosaic_forward  # Hopper only
    mosaic_forward.check_supported(params, q, k, v, arrays)
  if params.forward == "decode":
    decode_kernel.check_supported(params, q, k)


def _backward(params: KernelParams, q, k, v,
              arrays: masks.MaskArrays | None) -> str:
  """The backward backend of a forward one: Mosaic GPU where its backward
  takes the input (not e.g. head_dim > 128 without ``split_head_dim``, nor
  a bias at head_dim > 128), else Pallas-Triton (also the decode kernel's
  backward).  Chosen before the forward runs, so whether a bias will take
  a gradient is not known yet: the Mosaic backward's check holds for
  both (``MosaicBackwardConfig.bias_bytes``)."""
  if (params.forward == "mosaic"
      and score_terms(arrays, params.dropout_rate) <= _TAKES["mosaic"]):
    from pallas_flash.mosaic import backward as mosaic_backward  # Hopper only
    try:
      mosaic_backward.check_supported(params, q, k, v, arrays)
      return "mosaic"
    except NotImplementedError:
      pass
  return "triton"


def forward_fn(params: KernelParams):
  """The forward backend ``params.forward`` names."""
  if params.forward == "triton":
    return triton_forward.forward
  if params.forward == "mosaic":
    from pallas_flash.mosaic import forward as mosaic_forward  # Hopper only
    return mosaic_forward.forward
  if params.forward == "decode":  # split-KV; its backward is the Triton one
    return decode_kernel.forward
  raise ValueError(f"unknown forward backend {params.forward!r}")


def backward_fn(params: KernelParams):
  """The backward backend ``params.backward`` names."""
  if params.backward == "triton":
    return triton_backward.backward
  if params.backward == "mosaic":
    from pallas_flash.mosaic import backward as mosaic_backward  # Hopper only
    return mosaic_backward.backward
  raise ValueError(f"unknown backward backend {params.backward!r}")


# --- validation ---------------------------------------------------------------

def validate(query, key, value, bias, mask, scale, is_causal, q_lengths,
              kv_lengths, window, implementation, causal_alignment, q_seg,
              kv_seg, cap, deterministic=True, fp8: bool = False,
              context_parallel=None):
  """``fp8``: float8_e4m3fn q, k and v are taken too (flash_attention's
  forward; ``validate_descales`` checks their descales)."""
  if context_parallel not in CONTEXT_PARALLEL:
    raise ValueError(f"context_parallel={context_parallel!r} must be one of "
                     f"{CONTEXT_PARALLEL}")
  if not isinstance(deterministic, bool):
    raise ValueError(f"deterministic={deterministic!r} must be a bool")
  if implementation not in IMPLEMENTATIONS:
    raise ValueError(f"implementation={implementation!r} must be one of "
                     f"{IMPLEMENTATIONS}")
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
  if (FP8 in (q.dtype, k.dtype, v.dtype)
      and not q.dtype == k.dtype == v.dtype == FP8):
    raise ValueError(f"float8_e4m3fn inputs must be all of query, key and "
                     f"value, got {q.dtype}, {k.dtype}, {v.dtype}")
  if q.dtype not in DTYPES and not (fp8 and q.dtype == FP8):
    raise ValueError(f"query dtype {q.dtype} must be float16, bfloat16 or "
                     f"float32{' or float8_e4m3fn' if fp8 else ''}")
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
  if mask is not None:
    mask = broadcastable(mask, "mask", True, full)
  if bias is not None:
    bias = broadcastable(bias, "bias", False, full)

  spec = masks.MaskSpec(
      is_causal=bool(is_causal), bottom_right=causal_alignment == "bottom_right",
      window=window, has_segments=q_seg is not None,
      dense_mask_shape=None if mask is None else tuple(mask.shape))
  arrays = masks.MaskArrays(q_len, kv_len, q_seg, kv_seg, mask, bias)
  return q, k, v, arrays, spec, float(scale), cap, squeeze


def validate_shares(entry: str, query, key, value, scale, is_causal,
                    q_lengths, kv_lengths, window, implementation,
                    causal_alignment, q_seg, kv_seg, cap):
  """``validate`` for the sequence-parallel entry points (``entry``:
  ``ring_attention``, ``ulysses_attention``), which take each device's
  [B, T, N, H] shares and no bias or mask here (their dense mask is checked
  by the caller): (q, k, v, arrays, spec, scale, cap)."""
  q, k, v, arrays, spec, scale, cap, squeeze = validate(
      query, key, value, None, None, scale, is_causal, q_lengths, kv_lengths,
      window, implementation, causal_alignment, q_seg, kv_seg, cap)
  if squeeze:
    raise ValueError(f"{entry} takes [B, T, N, H] shares, got query "
                     f"{jnp.shape(query)}")
  return q, k, v, arrays, spec, scale, cap


def validate_descales(q, k, descales):
  """(q_descale, k_descale, v_descale) as float32 [B, K], or None for
  non-fp8 input without descales.  ``descales``: the user's (q_descale,
  k_descale, v_descale), each None (1) or float32 broadcastable to [B, K]
  (a scalar, [K], [1, K], [B, 1], [B, K]); q (normalised [B, T, N, H]) is
  float8_e4m3fn iff k and v are (``validate``).  Descales are scale factors
  > 0: a concrete one that is not raises here, a traced one becomes NaN, so
  that the output is NaN rather than silently wrong."""
  names = ("q_descale", "k_descale", "v_descale")
  b, kh = q.shape[0], k.shape[2]
  if q.dtype != FP8:
    for name, x in zip(names, descales):
      if x is not None:
        raise ValueError(f"{name} is given but the inputs are {q.dtype}; "
                         "descales go with float8_e4m3fn query, key and value")
    return None
  out = []
  for name, x in zip(names, descales):
    if x is None:
      out.append(jnp.ones((b, kh), jnp.float32))
      continue
    if isinstance(x, (int, float, np.floating, np.integer)):
      x = np.float32(x)
    if not hasattr(x, "dtype") or jnp.dtype(x.dtype) != jnp.float32:
      raise ValueError(f"{name} must be float32, got "
                       f"{getattr(x, 'dtype', type(x).__name__)}")
    shape = tuple(np.shape(x))
    if len(shape) > 2 or any(d not in (1, f) for d, f in
                             zip((1,) * (2 - len(shape)) + shape, (b, kh))):
      raise ValueError(f"{name} of shape {shape} does not broadcast to "
                       f"[B, K] = {[b, kh]} (batch, kv heads)")
    if not isinstance(x, jax.core.Tracer):
      bad = np.asarray(x)
      if not np.all(np.isfinite(bad) & (bad > 0)):
        raise ValueError(f"{name}={bad.tolist()} must be finite and > 0")
    x = jnp.broadcast_to(jnp.asarray(x), (b, kh))
    out.append(jnp.where(jnp.isfinite(x) & (x > 0), x, jnp.nan))
  return tuple(out)


def broadcastable(x, name: str, is_bool: bool, full):
  """A boolean mask (``is_bool``) or float bias that broadcasts to ``full``
  = [B, N, T, S], as a 4-D array (size-1 dims kept)."""
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


def validate_score_terms(arrays, b, n, slopes, rate, rng, broadcast):
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
