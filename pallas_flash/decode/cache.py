"""KV-cache attention for generation: append the new tokens' K/V and attend.

Two cache layouts (flash-attn's ``flash_attn_with_kvcache`` is the model):

* contiguous: ``k_cache``/``v_cache`` ``[B, S, K, H]``, sequence ``b``'s
  tokens at rows ``0 .. cache_lengths[b] - 1``;
* paged (vLLM): ``k_pages``/``v_pages`` ``[P, page_size, K, H]`` shared by all
  sequences and ``block_table`` ``[B, max_pages]`` int32: token ``j`` of
  sequence ``b`` lives in page ``block_table[b, j // page_size]`` at row
  ``j % page_size``.

Both append the T new tokens at positions ``cache_lengths[b] .. + T - 1``
(functionally: the updated caches are returned; under ``jax.jit`` with the
caches donated XLA updates them in place) and attend with the new tokens as
the last ones (``causal_alignment="bottom_right"``).  New tokens that would
land past the cache's capacity are dropped, never written elsewhere; when
``cache_lengths`` is concrete that raises ``ValueError`` instead.

Letters as in ``api.py``: B batch, T new tokens, S cache capacity, N query
heads, K kv heads, H head dim, P pages.
"""
from __future__ import annotations

import functools
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np

from pallas_flash import _dispatch, api, masks, reference
from pallas_flash.decode import kernel
from pallas_flash.params import KernelParams

Implementation = Literal["xla", "pallas"]


def attend_with_cache(q, k_new, v_new, k_cache, v_cache, cache_lengths, *,
                      scale: float | None = None, is_causal: bool = True,
                      local_window_size: int | tuple[int, int] | None = None,
                      logits_soft_cap: float | None = None,
                      implementation: Implementation | None = None,
                      config: kernel.DecodeConfig | None = None):
  """Appends ``k_new``/``v_new`` to a contiguous cache and attends.

  Args:
    q: ``[B, T, N, H]`` queries of the T new tokens.
    k_new, v_new: ``[B, T, K, H]`` their keys and values.
    k_cache, v_cache: ``[B, S, K, H]``, same dtype.
    cache_lengths: int ``[B]``: tokens already in each sequence's cache; the
      new ones go to rows ``cache_lengths[b] .. + T - 1``.
    scale, local_window_size, logits_soft_cap: as in ``flash_attention``.
    is_causal: new token ``t`` sees the cache and new tokens ``<= t``
      (bottom-right causal); ``False``: all of them.
    implementation: ``None``: ``flash_attention``'s choice (the split-KV
      kernel on a GPU, the f32 reference on a CPU); ``"pallas"``: the
      split-KV kernel (Pallas interpret mode off-GPU); ``"xla"``: the f32
      reference.
    config: ``DecodeConfig`` for the split-KV kernel.

  Returns:
    ``(out [B, T, N, H], k_cache, v_cache)`` with the caches updated.

  Raises:
    ValueError: for malformed shapes, or concrete lengths with
      ``cache_lengths[b] + T > S`` or ``< 0``.
  """
  q, k_new, v_new, k_cache, v_cache = (
      jnp.asarray(x) for x in (q, k_new, v_new, k_cache, v_cache))
  if k_cache.ndim != 4 or v_cache.shape != k_cache.shape:
    raise ValueError(f"k_cache {k_cache.shape} and v_cache {v_cache.shape} must "
                     "both be [B, S, K, H]")
  b, s, kh, h = k_cache.shape
  t = _check_new(q, k_new, v_new, k_cache, (b, kh, h))
  lengths = _check_lengths(cache_lengths, b, t, s, "cache capacity S")
  rows = lengths[:, None] + jnp.arange(t, dtype=jnp.int32)[None, :]  # [B, T]
  batch = jnp.arange(b)[:, None]
  k_cache = k_cache.at[batch, rows].set(k_new, mode="drop")
  v_cache = v_cache.at[batch, rows].set(v_new, mode="drop")
  if implementation not in (None, "xla", "pallas"):
    raise ValueError(f"implementation={implementation!r} must be None, 'xla' "
                     "or 'pallas'")
  if implementation == "pallas":
    implementation, config = "triton", config or kernel.DecodeConfig()
  out = api.flash_attention(
      q, k_cache, v_cache, scale=scale, is_causal=is_causal,
      causal_alignment="bottom_right",
      key_value_seq_lengths=jnp.minimum(lengths + t, s),
      local_window_size=local_window_size, logits_soft_cap=logits_soft_cap,
      implementation=implementation, config=config)
  return out, k_cache, v_cache


def attend_with_paged_cache(q, k_new, v_new, k_pages, v_pages, block_table,
                            cache_lengths, *, scale: float | None = None,
                            is_causal: bool = True,
                            local_window_size: int | tuple[int, int] | None = None,
                            logits_soft_cap: float | None = None,
                            implementation: Implementation | None = None,
                            config: kernel.DecodeConfig | None = None):
  """Appends ``k_new``/``v_new`` into a paged cache and attends.

  Args:
    q, k_new, v_new, cache_lengths, scale, is_causal, local_window_size,
      logits_soft_cap, implementation, config: as in ``attend_with_cache``.
    k_pages, v_pages: ``[P, page_size, K, H]`` page pools.
    block_table: int32 ``[B, max_pages]``: sequence ``b``'s token ``j`` is in
      page ``block_table[b, j // page_size]``.  The pages a sequence uses
      must be its own; entries past its length are never read.

  Returns:
    ``(out [B, T, N, H], k_pages, v_pages)`` with the new tokens written.

  Raises:
    ValueError: for malformed shapes, concrete lengths beyond
      ``max_pages * page_size``, or (concrete table and lengths) a page a
      sequence uses outside ``[0, P)``.
  """
  q, k_new, v_new, k_pages, v_pages = (
      jnp.asarray(x) for x in (q, k_new, v_new, k_pages, v_pages))
  num_pages, page_size, kh, h = _check_pages(k_pages, v_pages)
  table = _check_table(block_table, q.shape[0] if q.ndim == 4 else None)
  b, max_pages = table.shape
  t = _check_new(q, k_new, v_new, k_pages, (b, kh, h))
  lengths = _check_lengths(cache_lengths, b, t, max_pages * page_size,
                           "max_pages * page_size")
  _check_used_pages(table, lengths + t, page_size, num_pages)
  pos = lengths[:, None] + jnp.arange(t, dtype=jnp.int32)[None, :]  # [B, T]
  slot = pos // page_size
  page = jnp.take_along_axis(table, jnp.clip(slot, 0, max_pages - 1), axis=1)
  ok = (slot < max_pages) & (page >= 0) & (page < num_pages)
  page = jnp.where(ok, page, num_pages)  # out of range: dropped by the scatter
  k_pages = k_pages.at[page, pos % page_size].set(k_new, mode="drop")
  v_pages = v_pages.at[page, pos % page_size].set(v_new, mode="drop")
  out = paged_attention(
      q, k_pages, v_pages, table, jnp.minimum(lengths + t, max_pages * page_size),
      scale=scale, is_causal=is_causal, local_window_size=local_window_size,
      logits_soft_cap=logits_soft_cap, implementation=implementation,
      config=config)
  return out, k_pages, v_pages


def paged_attention(q, k_pages, v_pages, block_table, lengths, *,
                    scale: float | None = None, is_causal: bool = True,
                    local_window_size: int | tuple[int, int] | None = None,
                    logits_soft_cap: float | None = None,
                    implementation: Implementation | None = None,
                    config: kernel.DecodeConfig | None = None):
  """Attention of ``q`` [B, T, N, H] over paged K/V (no append).

  ``lengths`` int [B] counts each sequence's tokens including the T queries'
  own (the queries are the last ``T`` of them: bottom-right causal).  Other
  arguments as in ``attend_with_paged_cache``.  Forward only: ``jax.grad``
  through it raises ``NotImplementedError``.
  """
  q, k_pages, v_pages = (jnp.asarray(x) for x in (q, k_pages, v_pages))
  num_pages, page_size, kh, h = _check_pages(k_pages, v_pages)
  table = _check_table(block_table, q.shape[0] if q.ndim == 4 else None)
  b, max_pages = table.shape
  s = max_pages * page_size
  lengths = _check_lengths(lengths, b, 0, s, "max_pages * page_size")
  _check_used_pages(table, lengths, page_size, num_pages)
  if implementation not in (None, "xla", "pallas"):
    raise ValueError(f"implementation={implementation!r} must be None, 'xla' "
                     "or 'pallas'")
  # The options are validated by flash_attention's own checks, on the
  # shapes of the gathered [B, S, K, H] cache (no data is gathered here).
  kv = jax.ShapeDtypeStruct((b, s, kh, h), k_pages.dtype)
  seen = {}

  def validate(q, k, v, lengths):
    _, _, _, arrays, spec, scl, cap, _ = _dispatch.validate(
        q, k, v, None, None, scale, is_causal, None, lengths,
        local_window_size, None, "bottom_right", None, None, logits_soft_cap)
    seen.update(spec=spec, scale=scl, cap=cap)
    return arrays.q_len

  jax.eval_shape(validate, q, kv, kv, lengths)
  spec, scale, cap = seen["spec"], seen["scale"], seen["cap"]
  arrays = masks.MaskArrays(jnp.full((b,), q.shape[1], jnp.int32), lengths)
  if implementation == "xla" or (implementation is None
                                 and not _dispatch.on_gpu()):
    k, v = (_gather_pages(x, table) for x in (k_pages, v_pages))
    out, _ = reference.attention(q, k, v, arrays, spec=spec, scale=scale,
                                 logits_soft_cap=cap)
    return out
  params = KernelParams(spec=spec, scale=scale, logits_soft_cap=cap,
                        forward="decode", config=config,
                        interpret=not _dispatch.on_gpu())
  return _paged(params, q, k_pages, v_pages, table, arrays)


def _gather_pages(pages, table):
  """[P, page_size, K, H] pages -> the [B, max_pages * page_size, K, H] cache."""
  b, max_pages = table.shape
  x = pages[jnp.clip(table, 0, pages.shape[0] - 1)]  # [B, M, page_size, K, H]
  return x.reshape(b, max_pages * pages.shape[1], *pages.shape[2:])


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _paged(params, q, k_pages, v_pages, table, arrays):
  return kernel.paged_forward(q, k_pages, v_pages, table, arrays, params)[0]


def _paged_fwd(params, q, k_pages, v_pages, table, arrays):
  return _paged(params, q, k_pages, v_pages, table, arrays), None


def _paged_bwd(params, residuals, d_out):
  raise NotImplementedError(
      "paged_attention is forward only; differentiate flash_attention over a "
      "contiguous cache instead")


_paged.defvjp(_paged_fwd, _paged_bwd)


def _check_new(q, k_new, v_new, cache, bkh):
  """Validates q [B, T, N, H] and k_new/v_new [B, T, K, H] against the cache."""
  b, kh, h = bkh
  if q.ndim != 4:
    raise ValueError(f"q must be [B, T, N, H], got shape {q.shape}")
  t = q.shape[1]
  if k_new.shape != (b, t, kh, h) or v_new.shape != k_new.shape:
    raise ValueError(f"k_new {k_new.shape} and v_new {v_new.shape} must be "
                     f"[B, T, K, H] = {[b, t, kh, h]}")
  if q.shape[0] != b or q.shape[3] != h:
    raise ValueError(f"q {q.shape} must be [B={b}, T, N, H={h}]")
  if not (k_new.dtype == v_new.dtype == cache.dtype):
    raise ValueError(f"k_new ({k_new.dtype}), v_new ({v_new.dtype}) and the "
                     f"cache ({cache.dtype}) must have one dtype")
  return t


def _check_lengths(lengths, b: int, t: int, capacity: int, what: str):
  """int32 [B]; with concrete values, 0 <= length and length + t <= capacity."""
  lengths = jnp.asarray(lengths)
  if lengths.shape != (b,) or not jnp.issubdtype(lengths.dtype, jnp.integer):
    raise ValueError(f"lengths must be an int array of shape ({b},), got "
                     f"{lengths.dtype}{list(lengths.shape)}")
  values = _concrete(lengths)
  if values is not None:
    if values.min(initial=0) < 0 or values.max(initial=0) + t > capacity:
      raise ValueError(f"lengths={values.tolist()} plus {t} new tokens must lie "
                       f"in [0, {what}={capacity}]")
  return lengths.astype(jnp.int32)


def _check_pages(k_pages, v_pages):
  if k_pages.ndim != 4 or v_pages.shape != k_pages.shape:
    raise ValueError(f"k_pages {k_pages.shape} and v_pages {v_pages.shape} must "
                     "both be [P, page_size, K, H]")
  if k_pages.dtype != v_pages.dtype:
    raise ValueError(f"k_pages ({k_pages.dtype}) and v_pages ({v_pages.dtype}) "
                     "must have one dtype")
  return k_pages.shape


def _check_table(block_table, b: int | None):
  table = jnp.asarray(block_table)
  if (table.ndim != 2 or not jnp.issubdtype(table.dtype, jnp.integer)
      or (b is not None and table.shape[0] != b)):
    raise ValueError(f"block_table must be an int array [B={b}, max_pages], got "
                     f"{table.dtype}{list(table.shape)}")
  return table.astype(jnp.int32)


def _check_used_pages(table, lengths, page_size: int, num_pages: int):
  """With a concrete table and lengths: the pages each sequence uses (slots
  below ceil(length / page_size)) must lie in [0, P).  Unused slots may hold
  anything (e.g. -1 padding); the kernel never reads them."""
  values, lens = _concrete(table), _concrete(lengths)
  if values is None or lens is None:
    return
  used = np.arange(values.shape[1])[None, :] < -(-lens[:, None] // page_size)
  bad = used & ((values < 0) | (values >= num_pages))
  if bad.any():
    b, slot = np.argwhere(bad)[0]
    raise ValueError(f"block_table[{b}, {slot}]={values[b, slot]} must lie in "
                     f"[0, P={num_pages}) (sequence {b} has {lens[b]} tokens)")


def _concrete(x):
  """x as a NumPy array, or None when it is traced (under jit)."""
  try:
    return np.asarray(x)
  except (jax.errors.TracerArrayConversionError,
          jax.errors.ConcretizationTypeError):
    return None
