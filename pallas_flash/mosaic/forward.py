"""FlashAttention-3-style forward for Hopper, written in Pallas Mosaic GPU.

Letters: B batch, T query length, S key/value length, N query heads,
K key/value heads (G = N // K), H head dim.  Layout [B, T, N, H].

One CTA computes ``C * block_q`` query rows of one (batch, head) with C + 1
warpgroups, C = ``MosaicConfig.consumers`` (2, or 3 as FA3 runs at head dim
64) (FA3, Shah et al. 2024, Sec. 3.1 "producer-consumer asynchrony"):

* the *producer* warpgroup (registers cut with ``setmaxnreg``) issues TMA
  copies of the K and V tiles into a ``num_stages``-deep shared-memory ring;
  a K slot and a V slot each carry a "loaded" barrier (TMA completes it) and
  a "consumed" barrier (every consumer arrives on it when done reading);
* C *consumer* warpgroups (registers raised) each own ``block_q`` query rows
  and run S = Q K^T and O += P V on the tensor cores (wgmma, f32
  accumulators) with the online softmax in between (FlashAttention-2 Alg. 1).
  One "turn" barrier per consumer makes them take turns on the tensor cores
  in a ring, so one's softmax overlaps the others' GEMMs (FA3 Sec. 3.1,
  "ping-pong scheduling"): a consumer hands the turn on as soon as its S GEMM
  is issued and takes it back before its P V GEMM; the wait for the next K
  tile is issued while the P V wgmma is in flight.  With ``overlap_softmax``
  (FA3 Sec. 3.2, Alg. 2) one turn issues S(j) and P(j-1) V(j-1) together and
  softmax(j) runs while that P V GEMM is in flight (``overlapped_step``).

The consumers' "slot consumed" signals and the turns are named hardware
barriers (``bar.arrive`` / ``bar.sync``): an mbarrier arrival from a whole
warpgroup is 128 shared-memory atomics, a named-barrier arrival is one
instruction.  The interpreter cannot run PTX, so under ``interpret`` the same
protocol runs on mbarriers (``Sync``).

Softmax runs in base 2 with the scale folded into the exponent
(exp2(s * scale * log2 e - m)), one FMA per score.  Causal CTAs are launched
longest first so the expensive diagonal-far tiles start early.

A work item is one such CTA's rows.  ``MosaicConfig.persistent`` launches one
CTA per SM instead (FA3 Sec. 3.1's persistent kernel), each running the
items that a trace-time list schedule (``schedule.py``) gave it.  The K/V
ring runs on across items, the next item's Q is loaded while the current one
finishes, and O leaves through its own store slots.

Masking is ``pallas_flash.masks``: the wrapper turns ``kv_bounds`` /
``tile_range`` (and, with segment ids, ``segment_tile_ranges``) into per-CTA
tile bounds ``[first, full_first, full_last, last)``; tiles inside
``[full_first, full_last)`` run without any mask, edge tiles apply
``position_visible`` (and ``segment_visible`` / the dense boolean mask, read
as int8 tiles) element-wise; with segment ids or a dense mask every visited
tile is masked and leading / trailing tiles with no visible pair are skipped.
The visiting order (``MosaicConfig.masked_first``) is a per-head-dim choice
of the config table.
Ragged S is padded inside the wrapper to whole tiles (padded keys lie
beyond ``kv_len``); so is T unless it is whole 8-row tiles, where TMA reads
q's rows past T as zeros and drops O's stores there (LSE always has whole
tiles: ``forward``).  Padded rows are sliced off, so results are exact.

The pieces shared with the backward are in ``pipeline.py`` (``Sync``,
``Item``, ``run_steps``, ``load_kv_tiles``) and ``score_tiles.py`` (the edge
tiles' mask, ALiBi, dropout, the bias ring); this file has the forward's
softmax, P V, fp8 packing, epilogue, kernel body and host wrapper.
"""
from __future__ import annotations

import functools
import math

import jax
from jax import lax
import jax.experimental.pallas as pl
import jax.experimental.pallas.mosaic_gpu as plgpu
from jax.experimental.mosaic import gpu as mgpu
from jax.experimental.mosaic.gpu import utils as mgpu_utils
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import vector as vector_dialect
import jax.numpy as jnp
import numpy as np

from pallas_flash import masks
from pallas_flash.mosaic import (compile_ahead, kernel_names, lowering_cache,
                                  schedule, v_transpose)
from pallas_flash.mosaic.config import OUT_COLS, MosaicConfig, out_slots
from pallas_flash.mosaic.pipeline import (
    REGISTERS, ROW, WGMMA, Item, Sync, load_kv_tiles, phase, run_steps)
from pallas_flash.mosaic.score_tiles import (
    LOG2E, AlibiTile, BiasRing, DropoutTiles, alibi_slopes, alibi_split,
    dropout_keys, folds_alibi, mask_refs, query_tile_visible, segment_ids)
from pallas_flash.mosaic.v_transpose import fp8_key_order
from pallas_flash.params import KernelParams

_LN2 = math.log(2.0)
_MASK = masks.MASK_VALUE
_DTYPES = (jnp.dtype(jnp.float16), jnp.dtype(jnp.bfloat16))
FP8 = jnp.dtype(jnp.float8_e4m3fn)  # q, k, v of the fp8 forward; O is bf16
# fp8: P = exp2(x - m + 8) lies in [0, 256] (e4m3's largest value is 448), so
# small probabilities keep e4m3's 3 mantissa bits instead of flushing below
# 2^-9 (FA3's Max_offset); l and the LSE carry the 2^8.
_P_LOG2_MAX = 8.0

# Equal kernels get equal module bytes, so XLA compiles each once per process
# (kernel_names.py), are lowered once per process (lowering_cache.py), and
# are compiled while the rest of their program lowers (compile_ahead.py).
kernel_names.install()
lowering_cache.install()
compile_ahead.install()


def round_up(x: int, m: int) -> int:
  return -(-x // m) * m


def _num_sms() -> int:
  """Streaming multiprocessors of the GPU (132 on an H100 / H200 SXM)."""
  return int(getattr(jax.devices()[0], "core_count", 132))


def skips_idle_steps(consumers: int, bias: bool,
                     overlap_softmax: bool) -> bool:
  """Whether a CTA's consumers skip the steps they have no visible score
  in (``_attention_kernel``'s ``idle_step``; the persistent schedule then
  weighs items by ``schedule.consumer_steps``).  Only three consumers: a
  192-row CTA leaves whole consumers past T (4096 = 21 x 192 + 64) and its
  consumers' diagonals fall in different kv tiles; two (128 rows) skip
  nothing at T a multiple of 128, and the branch cost them 0.5-1.6% (H200).
  Not with the bias ring, nor in the softmax-overlap form."""
  return consumers == 3 and not bias and not overlap_softmax


def persistent_ctas(num_items: int, interpret: bool) -> int:
  """CTAs of a persistent launch: one per SM (3 in interpret mode, where
  the CPU simulates them: more items than CTAs at test sizes), never more
  than the items."""
  return min(num_items, 3 if interpret else _num_sms())


def _config(params: KernelParams, q, k,
            arrays: masks.MaskArrays | None) -> tuple[int, MosaicConfig]:
  """(padded head dim, the given config or the table's default for it):
  the one place the forward's config is chosen (``check_supported`` and
  ``forward`` both ask here)."""
  fp8 = jnp.dtype(q.dtype) == FP8
  hp = padded_head_dim(q.shape[-1], fp8)
  spec = params.spec
  alibi = arrays is not None and arrays.alibi_slopes is not None
  if params.config is not None:
    return hp, params.config
  bias_bytes = bias_itemsize(arrays)
  cfg = MosaicConfig.default(
      hp, spec.is_causal, spec.needs_elementwise, k.shape[1],
      dropout=params.dropout_rate > 0.0, q_seqlen=q.shape[1], alibi=alibi,
      window=spec.window is not None, fp8=fp8, bias=bool(bias_bytes))
  if bias_bytes:  # room for the bias ring
    cfg = cfg.with_bias(hp, bias_bytes, spec.is_causal)
  return hp, cfg


def bias_itemsize(arrays: masks.MaskArrays | None) -> int:
  """Bytes per element of the call's bias (0: none), which the forward
  reads through its bias ring (``BiasRing``)."""
  if arrays is None or arrays.bias is None:
    return 0
  return jnp.dtype(arrays.bias.dtype).itemsize


def padded_head_dim(h: int, fp8: bool = False) -> int:
  """The kernel's head dim: a multiple of 64 (a 128-byte swizzle of bf16);
  fp8: 64 (64-byte rows) or a multiple of 128 (a 128-byte swizzle)."""
  if fp8 and h > 64:
    return round_up(h, 128)
  return round_up(h, 64)


def check_supported(params: KernelParams, q, k, v,
                    arrays: masks.MaskArrays | None = None) -> None:
  """Raises NotImplementedError for valid input this backend cannot take.
  ``arrays``: the call's mask arrays, where the config depends on them
  (ALiBi); None checks the config of a call without them."""
  del v
  fp8 = jnp.dtype(q.dtype) == FP8
  if jnp.dtype(q.dtype) not in _DTYPES and not fp8:
    raise NotImplementedError(
        f"mosaic forward takes float16/bfloat16/float8_e4m3fn, got {q.dtype} "
        "(the dispatcher falls back to triton)")
  if fp8:
    alibi = arrays is not None and arrays.alibi_slopes is not None
    if alibi or params.dropout_rate > 0.0:
      raise NotImplementedError(
          "the mosaic fp8 forward takes no ALiBi or dropout (the dispatcher "
          "falls back to the reference on dequantized inputs)")
  if params.config is not None and not isinstance(params.config, MosaicConfig):
    raise ValueError(f"config for implementation='mosaic' must be a "
                     f"MosaicConfig, got {type(params.config).__name__}")
  check_bias(arrays, q, k, fp8)  # input the kernel never takes, any device
  if not params.interpret:
    dev = jax.devices()[0]
    cc = str(getattr(dev, "compute_capability", ""))
    if dev.platform != "gpu" or not cc.startswith("9"):
      raise NotImplementedError(
          f"mosaic forward needs a Hopper GPU (sm_90), got {dev.device_kind} "
          f"compute_capability={cc!r}")
  h, cfg = _config(params, q, k, arrays)
  if cfg.consumers == 3 and cfg.block_kv >= 256:
    # A [64, 256] f32 score tile per consumer in 160 registers: Mosaic GPU's
    # pass pipeline fails (JAX 0.11.2; d64 bf16 and d128 fp8, H200).
    raise NotImplementedError(f"three consumers take block_kv <= 192, got "
                              f"{cfg.block_kv}")
  if fp8 and cfg.block_kv % 128:
    # V^T's tiles [H, block_kv] are swizzled by 128 bytes along the keys.
    raise NotImplementedError(f"the fp8 forward needs block_kv a multiple of "
                              f"128, got {cfg.block_kv}")
  smem = cfg.smem_bytes(h, fp8=fp8, bias_itemsize=bias_itemsize(arrays))
  if smem > 227 * 1024:
    raise NotImplementedError(f"{cfg} needs {smem} bytes of shared "
                              f"memory at head_dim={h}; Hopper has 227 KiB")


def check_bias(arrays: masks.MaskArrays | None, q, k, fp8: bool) -> None:
  """NotImplementedError for a bias the bias ring (``BiasRing``, the
  forward's and the backward's) cannot read (the dispatcher falls back to
  triton): it takes a float16 / bfloat16 bias with full query and key
  dims, [1 | B, 1 | N, T, S]."""
  if arrays is None or arrays.bias is None:
    return
  bias = arrays.bias
  if fp8 or jnp.dtype(bias.dtype) not in _DTYPES:
    raise NotImplementedError(
        f"the mosaic kernels take a float16 / bfloat16 bias with float16 / "
        f"bfloat16 q, k, v; got a {bias.dtype} bias, {q.dtype} inputs")
  if bias.shape[2:] != (q.shape[1], k.shape[1]):
    raise NotImplementedError(
        f"the mosaic kernels take a bias with full query and key dims "
        f"[1 | B, 1 | N, T, S], got {list(bias.shape)} for T={q.shape[1]}, "
        f"S={k.shape[1]}")


# --------------------------------------------------------------------------
# Kernel
# --------------------------------------------------------------------------


def _logits_base2(s, scale: float, cap: float | None):
  """scale, soft-cap, then x log2(e): what exp2 takes."""
  if cap is not None:
    return jnp.tanh(s * (scale / cap)) * (cap * LOG2E)
  return s * (scale * LOG2E)


def _row_reduce(x, kind: str, tree: int = 0, ilp: int = 0):
  """x [rows, n] reduced over its columns, ``kind`` "max" or "sum".  Mosaic
  GPU folds a thread's registers of one row in one dependent chain per
  vector lane (the max of a 64 x 256 tile: two chains of 32 FMNMX per row);
  with ``tree`` > 0 the column halves are first combined element-wise
  (independent registers: depth log2) down to ``tree`` columns.  ``ilp`` >
  0 (GPU only): Mosaic GPU's own reduction with ``acc_ilp=ilp`` (its
  default: 4 for max, 8 for sum, spread over a thread's rows, so one vector
  accumulator a row for the max of a tile's two rows a thread), i.e. ilp /
  2 / rows independent vector accumulators a row, no element-wise
  temporaries."""
  op = jnp.maximum if kind == "max" else jnp.add
  while tree and x.shape[1] > tree and x.shape[1] % 16 == 0:
    r, h = x.shape[0], x.shape[1] // 2  # (lax.slice: Mosaic takes no strides)
    x = op(lax.slice(x, (0, 0), (r, h)), lax.slice(x, (0, h), (r, 2 * h)))
  if ilp:
    @plgpu.inline_mgpu(
        arg_types=(WGMMA,),
        return_type=plgpu.ShapeDtypeStruct((x.shape[0],), x.dtype,
                                           layout=ROW))
    def reduce(_, x):
      return x.reduce("max" if kind == "max" else "add", 1, acc_ilp=ilp)
    return reduce(x)
  return x.max(axis=1) if kind == "max" else x.sum(axis=1)


def _tile_softmax(s, m_i, ab, visible, *, scale: float, cap: float | None,
                  alibi: bool, fold: bool, descale=None, bias=None,
                  reduction: tuple[int, int] = (0, 0)):
  """FA-2 Alg. 1 line 9 on one score tile S [bq, bk], in base 2: the
  logits (scale, soft-cap, ALiBi), the mask where ``visible`` (a callable
  giving the visible [bq, bk], or None for a tile with nothing masked), the
  new running max m_new [bq] from m_i and P = exp2(x - m_new); returns
  (m_new, P).  ``ab``: the tile's ``AlibiTile``; folded (``fold``), its
  k_vec is in S already and its q_vec joins each row's max and shift (m_i
  stays the max of the true logits).  ``descale`` (fp8): the traced
  q_descale * k_descale (> 0) that S is multiplied by, folded into the
  FMA's constant; P is then exp2(x - m_new + ``_P_LOG2_MAX``).  ``bias``:
  a callable giving the bias tile in base 2 (``BiasRing.logits``), added
  after the scale and soft-cap and before the mask.  ``reference`` clamps
  each biased logit to ``masks.MASK_VALUE``; here the row max is clamped
  instead (one op per row, not per score): a -inf logit gets P = 0 either
  way, and a row the bias masks entirely keeps m = MASK_VALUE, which the
  epilogue's fully-masked test reads as it does for the mask's rows.
  ``reduction``: the row max's form, ``_row_reduce``'s (tree, ilp)."""
  offset = 0.0 if descale is None else _P_LOG2_MAX

  def max_and_shift(row_max):  # -> m_new, what exp2 subtracts
    if fold:
      m_new = jnp.maximum(m_i, row_max + ab.q_vec)
      return m_new, m_new - ab.q_vec
    m_new = jnp.maximum(m_i, row_max)
    return m_new, m_new - offset if offset else m_new

  bcast = lambda x: lax.broadcast_in_dim(x, s.shape, [0])

  if fold:
    s = ab.add_rest(s, scale * LOG2E)
  fma = visible is None and cap is None and scale > 0 and bias is None
  if fma:  # max commutes with a positive scale: one FMA per score
    c = scale * LOG2E if descale is None else (scale * LOG2E) * descale
    m_new, shift = max_and_shift(_row_reduce(s, "max", *reduction) * c)
    return m_new, jnp.exp2(s * c - bcast(shift))
  if descale is not None:
    s = s * descale
  s = _logits_base2(s, scale, cap)
  if alibi and not fold:
    s = s + ab.full()
  if bias is not None:
    s = s + bias()
  if visible is not None:
    s = jnp.where(visible(), s, _MASK)
  row_max = _row_reduce(s, "max", *reduction)
  if bias is not None:  # (see above: the reference's clamp, per row)
    row_max = jnp.maximum(row_max, _MASK)
  m_new, shift = max_and_shift(row_max)
  return m_new, jnp.exp2(s - bcast(shift))


def _add_pv(acc, p16, v_smem, interpret: bool, in_flight=lambda: None,
            fp8: bool = False):
  """O += P V  [bq, H] (FA-2 Alg. 1 line 10's P V) on the tensor cores, P
  [bq, bk] from registers, V [bk, H] in shared memory (fp8: V^T [H, bk],
  keys in ``fp8_key_order`` like P's, ``fp8_p``); ``in_flight`` runs while
  the wgmma does."""
  if interpret:
    # GPU interpret mode models neither a register operand of wgmma nor
    # pl.run_state accumulators: same product, as a plain dot.
    v = v_smem[...].T if fp8 else v_smem[...]
    acc = acc + jnp.dot(p16, v, preferred_element_type=jnp.float32)
    in_flight()
    return acc

  def pv(acc_ref):
    plgpu.wgmma(acc_ref, p16, v_smem.transpose((1, 0)) if fp8 else v_smem)
    in_flight()
  return pl.run_state(pv)(plgpu.ACC.init(acc))


def fp8_p(p, interpret: bool):
  """P [bq, bk] f32 (WGMMA layout) as the fp8 P V GEMM's register operand:
  e4m3 (round to nearest, saturating) in the WGMMA_8BIT layout, keys in
  ``fp8_key_order`` (V^T's keys are stored in the same order).

  Per thread and 16-key block the f32 accumulator holds keys {2t, 2t+1,
  8+2t, 9+2t} of two rows, the 8-bit A operand {4t .. 4t+3}: packing a
  thread's own four values (two ``cvt.rn.satfinite.e4m3x2.f32``) instead
  of moving them between threads reorders the keys, which V^T's layout
  undoes for free (FA3 Sec. 3.3 meets the same layout mismatch with byte
  permutes).  Interpret mode: the same values in jnp."""
  if interpret:
    return fp8_key_order(p).astype(FP8)
  shape = mgpu.WGMMA_LAYOUT_8BIT.registers_shape(p.shape)

  @plgpu.inline_mgpu(
      arg_types=(WGMMA,),
      return_type=plgpu.ShapeDtypeStruct(p.shape, FP8,
                                         layout=plgpu.Layout.WGMMA_8BIT))
  def pack(_, x):
    i32 = ir.IntegerType.get_signless(32)
    f8x4 = ir.VectorType.get([4], ir.Float8E4M3FNType.get())
    ext = lambda reg, e: vector_dialect.extract(reg, [], [e])
    out = np.empty(shape, object)
    for idx in np.ndindex(shape):  # [0, 16-key block, .., row half, ..]
      lo = x.registers[(idx[0], 2 * idx[1], *idx[2:])]  # keys 2t, 2t+1
      hi = x.registers[(idx[0], 2 * idx[1] + 1, *idx[2:])]  # 8+2t, 9+2t
      word = mgpu_utils.inline_ptx(
          "{ .reg .b16 l, h; cvt.rn.satfinite.e4m3x2.f32 l, $2, $1; "
          "cvt.rn.satfinite.e4m3x2.f32 h, $4, $3; mov.b32 $0, {l, h}; }",
          ext(lo, 0), ext(lo, 1), ext(hi, 0), ext(hi, 1), result_types=i32)
      out[idx] = vector_dialect.bitcast(f8x4, vector_dialect.from_elements(
          ir.VectorType.get([1], i32), [word]))
    return mgpu.FragmentedArray(_registers=out,
                                _layout=mgpu.WGMMA_LAYOUT_8BIT,
                                _is_signed=None)

  return pack(p)


def _epilogue(acc, m_i, l_i, q_len, q_base, rate: float, dtype, out, o_dst,
              lse_smem, lse_dst, v_descale=None):
  """A consumer's epilogue (FA-2 Alg. 1 lines 12-15): O = acc / l  [bq, H]
  and LSE = m + log l  [bq] (m, l in base 2), by TMA into ``o_dst(cols)``
  ([bq, cols] of O in HBM) and ``lse_dst`` [bq] through shared memory.
  Rows at or past ``q_len`` (the tile's first row is ``q_base``) and fully
  masked rows give O = 0 and LSE = +inf; dropout scales O by
  1 / (1 - rate).  ``out``: (width, slots, buffer(d)): O leaves in
  [bq, width] pieces, piece d through ``buffer(d)``, one of ``slots``
  shared-memory slots, a slot rewritten once the TMA store that last read
  it is done (at most slots - 1 stores in flight): Q's buffer, one piece
  [bq, H], or in a persistent kernel (Q's buffer holds the next item's Q)
  [bq, OUT_COLS] pieces through the consumer's out_slots(H) slots (by the
  LSE write, all stores of the previous item are done as well).
  ``v_descale`` (fp8): O's factor, in the row's 1 / l; l then carries
  ``_P_LOG2_MAX``'s 2^8 (``_tile_softmax``), which the LSE takes out."""
  bq, head_dim = acc.shape
  rows = plgpu.broadcasted_iota(jnp.int32, (bq, head_dim), 0, layout=WGMMA)
  in_len = jnp.where(rows < q_len - q_base, 1.0, 0.0).max(axis=1)
  ok = (m_i > 0.5 * _MASK) & (in_len > 0.5) & (l_i > 0.0)
  l_safe = jnp.where(ok, l_i, 1.0)
  norm = l_safe * (1.0 - rate) if rate > 0.0 else l_safe  # dropout
  inv = jnp.where(ok, (1.0 if v_descale is None else v_descale) / norm, 0.0)
  acc = acc * lax.broadcast_in_dim(inv, acc.shape, [0])
  m2 = m_i if v_descale is None else m_i - _P_LOG2_MAX
  lse = jnp.where(ok, m2 * _LN2 + jnp.log(l_safe), jnp.inf)
  width, slots, out_buf = out
  for d in range(head_dim // width):
    plgpu.wait_smem_to_gmem(slots - 1, wait_read_only=True)
    out_buf(d)[...] = acc[:, d * width:(d + 1) * width].astype(dtype)
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(out_buf(d), o_dst(pl.ds(d * width, width)))
  lse_smem[...] = lse
  plgpu.commit_smem()
  plgpu.copy_smem_to_gmem(lse_smem, lse_dst)


def _attention_kernel(q_ref, k_ref, v_ref, tiles_ref, *refs,
                      spec: masks.MaskSpec, scale: float, cap: float | None,
                      block_q: int, block_kv: int, num_stages: int,
                      consumers: int,
                      num_q_tiles: int, group: int, longest_first: bool,
                      masked_first: bool, overlap_softmax: bool,
                      order: tuple[tuple[str, int], ...], num_ctas: int,
                      interpret: bool, alibi: bool = False,
                      rate: float = 0.0, bias: bool = False,
                      row_tree: int = 0, alibi_fma_keys: bool = False,
                      reduce_ilp: int = 0, bias_with_k: bool = False):
  """Work items of ``consumers * block_q`` query rows of one (b, n), in the
  launch ``order`` ((axis name, size), the last axis fastest).  num_ctas ==
  0: one CTA per item (a grid of ``order``); else a persistent kernel of
  num_ctas CTAs, CTA c running the items listed in row c of the schedule
  operand (``schedule.list_schedule``).  ``alibi``: the last operand holds
  ALiBi slopes (``alibi_slopes``), added to every score tile.  ``rate`` > 0:
  then the three ``dropout_keys`` operands; dropout zeroes P's dropped
  entries before O += P V (l sums the undropped P, as the Triton kernels
  and FlashAttention's dropout do) and O is scaled by 1 / (1 - rate) in the
  epilogue.  ``bias``: then the bias operand (``BiasRing``), added to every
  score tile.

  fp8 (q, k, v float8_e4m3fn; ``forward``'s fp8 notes): v_ref is V^T
  [B, K, H, S] in ``fp8_key_order``; an operand [B, N, 2] float32 after the
  masks holds each head's q_descale * k_descale (folded into the softmax's
  FMA) and v_descale (folded into the epilogue's 1 / l); P goes to the P V
  GEMM as e4m3 (``fp8_p``); O is out_ref's dtype (bf16)."""
  if num_ctas:
    sched_ref, *refs = refs
  q_seg_ref, kv_seg_ref, mask_ref, refs = mask_refs(spec, refs)
  slopes_ref = refs.pop(0) if alibi else None
  fp8 = q_ref.dtype == FP8
  # the row max / sum's form (``_row_reduce``; interpret mode: jnp's)
  reduction = (row_tree, 0 if interpret else reduce_ilp)
  descale_ref = refs.pop(0) if fp8 else None
  drop = DropoutTiles.pop(refs, rate, (block_q, block_kv), 0)
  bias_ref = refs.pop(0) if bias else None
  out_ref, lse_ref = refs
  dtype = q_ref.dtype
  head_dim = q_ref.shape[-1]
  bq, bk = block_q, block_kv

  def entry(smem, barriers):
    q_smems, k_smems, v_smems, o_smems, lse_smems, *key_smem = smem
    q_bars, k_bars, v_bars, *interpret_bars = barriers
    ring = None  # the bias ring: the last smem and barriers (``_scratch``)
    if bias_ref is not None:
      ring = BiasRing(bias_ref, key_smem.pop(), interpret_bars.pop())
    # dropout: the column keys of each step's key tile, [num_stages, bk]
    # int32, copied into the ring with V (``load_kv_tiles``)
    key_smem = key_smem[0] if drop is not None else None
    key_bars = interpret_bars.pop() if drop is not None else None
    wg = lax.axis_index("wg")
    sync = Sync(wg, consumers, num_stages,
                interpret_bars if interpret else None)
    last_wg = consumers - 1

    items = schedule.Items(order, sched_ref if num_ctas else None)
    num_items = items.count

    def work_item(i, lengths: bool = True) -> Item:
      b, n, qt = schedule.item_of(items.coords(i), order, num_q_tiles,
                                  longest_first)
      return Item(b, n, qt, tiles_ref, masked_first, lengths)

    @pl.when(wg < consumers)
    def _consumer():
      plgpu.set_max_registers(REGISTERS[consumers][0], action="increase")
      q_smem = q_smems.at[wg]

      def q_base_of(item: Item):  # this consumer's first query row
        return item.qt * (consumers * bq) + wg * bq

      def load_q(item: Item):
        rows = pl.ds(q_base_of(item), bq)
        plgpu.copy_gmem_to_smem(q_ref.at[item.b, rows, item.n], q_smem,
                                q_bars.at[wg])

      def add_pv(acc, p16, slot, in_flight=lambda: None):
        return _add_pv(acc, p16, v_smems.at[slot], interpret, in_flight, fp8)

      def run_item(i, g0):
        """Work item i; its step j uses ring slot (g0 + j) % num_stages."""
        item = work_item(i)
        b, n, n_steps = item.b, item.n, item.n_steps
        q_base = q_base_of(item)
        if not num_ctas:
          load_q(item)
        else:  # later items' Q was loaded during the previous item
          pl.when(i == 0)(lambda: load_q(item))
        if spec.has_segments:
          q_seg = segment_ids(q_seg_ref, b, pl.ds(q_base, bq), (bq, bk), 0)
        m_i = plgpu.layout_cast(jnp.full((bq,), -jnp.inf, jnp.float32), ROW)
        l_i = plgpu.layout_cast(jnp.full((bq,), 0.0, jnp.float32), ROW)
        acc = plgpu.layout_cast(jnp.full((bq, head_dim), 0.0, jnp.float32),
                                WGMMA)
        plgpu.barrier_wait(q_bars.at[wg])

        def slot_of(j):
          return lax.rem(g0 + j, num_stages)

        fold = alibi and folds_alibi(scale, cap)
        if alibi:
          slope2 = slopes_ref[b, n]
        qk_descale = descale_ref[b, n, 0] if fp8 else None
        if drop is not None:
          drop_rows = drop.rows(b, n, pl.ds(q_base, bq))

        def to_pv(p, j):  # P as the P V GEMM takes it: dropout's zeros in
          if drop is not None:  # (step j's column keys came with V(j))
            cols = drop.ring_cols(key_smem, key_bars, slot_of(j))
            (p,) = drop.select([(p, None)], drop_rows, cols, interpret)
          return fp8_p(p, interpret) if fp8 else p.astype(dtype)

        # Non-causal folded ALiBi: the plain tiles left of, across and right
        # of the diagonal in three loops (``alibi_split``), so that a step
        # knows its tile's side statically.
        alibi_tiles = (alibi_split(q_base, q_base + bq - 1, item.offset, bk,
                                   True)
                       if fold and not spec.is_causal else None)

        def alibi_of(j, side):  # the ALiBi of step j's score tile, or None
          if not alibi:
            return None
          # fixed_axis 0 on tiles of a static side +-1 (``AlibiTile``)
          fixed = 0 if spec.is_causal or side in (1, -1) else 1
          return AlibiTile(slope2, item.offset, q_base, item.tile_of(j) * bk,
                           (bq, bk), 0, spec.is_causal, fixed_axis=fixed,
                           side=side,
                           # (Mosaic GPU's layout inference found no
                           # solution with the bias ring, d128 causal, nor
                           # at block_kv 64, d256's)
                           fma_keys=(alibi_fma_keys and not interpret
                                     and ring is None and bk >= 128))

        def s_init(ab):  # the S accumulator's init, or None for zeros
          return ab.k_init(scale * LOG2E) if fold else None

        def tile_softmax(s, m_i, ki, *, masked: bool, ab=None, slot=None,
                         bias16=None):
          """``_tile_softmax`` of the score tile of kv tile ki; its bias
          tile: ``bias16`` (loaded under the S GEMM), else read here from
          ring slot ``slot``."""
          visible = None
          if masked:
            visible = lambda: query_tile_visible(
                spec, item, b, n, q_base, ki, (bq, bk),
                q_seg if spec.has_segments else None, kv_seg_ref, mask_ref,
                per_row=head_dim <= 64)
          bias_tile = None
          if ring is not None:
            bias_tile = lambda: BiasRing.logits(
                ring.load(slot, wg * bq, bq) if bias16 is None else bias16)
          return _tile_softmax(s, m_i, ab, visible, scale=scale, cap=cap,
                               alibi=alibi, fold=fold, descale=qk_descale,
                               bias=bias_tile, reduction=reduction)

        def step(j, carry, *, masked: bool, side=None):
          """S(j), softmax(j), then O += P(j) V(j) (FA-2 Alg. 1 inner loop)."""
          acc, m_i, l_i = carry
          slot = slot_of(j)
          ab = alibi_of(j, side)
          init = s_init(ab)

          # -- S = Q K^T  [bq, bk] on the tensor cores (from init: ALiBi)
          def issue_qk(acc_ref):
            plgpu.wgmma(acc_ref, q_smem, k_smems.at[slot].transpose((1, 0)))
            sync.pass_turn()  # my S GEMM is issued: the other's P V may go

          def qk(acc_ref):
            issue_qk(acc_ref)
            if ring is not None:  # the bias tile, read under the S GEMM
              return acc_ref[...], ring.load(slot, wg * bq, bq)
            return acc_ref[...]  # waits for the wgmma

          bias16 = None
          with phase("S"):
            if init is None or interpret:  # (interpret: no ACC.init)
              s = pl.run_scoped(qk, plgpu.ACC((bq, bk), jnp.float32))
              if ring is not None:
                s, bias16 = s
              s = s if init is None else s + init
            else:
              s = pl.run_state(issue_qk)(plgpu.ACC.init(init))
              if ring is not None and bias_with_k:  # before K's release
                bias16 = ring.load(slot, wg * bq, bq)
          sync.release(0, slot)

          # -- update m_i and l_i (base 2)
          with phase("softmax"):
            m_new, p = tile_softmax(s, m_i, item.tile_of(j), masked=masked,
                                    ab=ab, slot=slot, bias16=bias16)
            alpha = jnp.exp2(m_i - m_new)
            acc = acc * lax.broadcast_in_dim(alpha, acc.shape, [0])
            l_i = l_i * alpha
            p16 = to_pv(p, j)
            if head_dim <= 128:
              # Order found by the JAX/tokamax authors to schedule best for
              # d <= 128.
              l_i = l_i + _row_reduce(p, "sum", *reduction)
              acc, l_i, m_new, p16 = lax.optimization_barrier(
                  (acc, l_i, m_new, p16))
          with phase("V wait"):
            plgpu.barrier_wait(v_bars.at[slot])
          with phase("turn"):
            sync.take_turn()  # the other's S GEMM is issued: tensor cores mine
          if head_dim > 128:
            l_i = l_i + _row_reduce(p, "sum", *reduction)

          # -- O += P V  [bq, H]; meanwhile wait for the next K tile
          def wait_next_k():
            @pl.when(j + 1 < n_steps)
            def _():
              plgpu.barrier_wait(k_bars.at[slot_of(j + 1)])

          with phase("PV"):
            acc = add_pv(acc, p16, slot, wait_next_k)
          sync.release(1, slot)
          return acc, m_new, l_i

        def overlapped_step(j, carry, *, masked: bool, side=None):
          """Issue S(j) and O += P(j-1) V(j-1) together, run softmax(j) while
          the P V GEMM is in flight, then rescale O (FA3 Sec. 3.2, Alg. 2:
          intra-warpgroup overlap of softmax and GEMMs).  Step 0 has no
          P(-1): it multiplies P = 0 into V(0), which adds exactly nothing."""
          acc, m_i, l_i, p_prev = carry
          slot = slot_of(j)
          prev = slot_of(jnp.maximum(j - 1, 0))
          ab = alibi_of(j, side)
          init = s_init(ab)
          with phase("K V wait"):
            pl.when(j != 1)(lambda: plgpu.barrier_wait(v_bars.at[prev]))
            plgpu.barrier_wait(k_bars.at[slot])
          with phase("turn"):
            sync.take_turn()
          k_t = k_smems.at[slot].transpose((1, 0))
          zeros_s = plgpu.layout_cast(jnp.zeros((bq, bk), jnp.float32), WGMMA)

          def softmax(s, bias16=None):  # -> m, l, P(j), alpha
            sync.release(0, slot)
            m_new, p = tile_softmax(s, m_i, item.tile_of(j), masked=masked,
                                    ab=ab, slot=slot, bias16=bias16)
            alpha = jnp.exp2(m_i - m_new)
            # fp8: P(j) leaves in f32 and is packed once P(j-1) V(j-1) is
            # done.  Packed here, the e4m3 words (inline PTX) were written
            # into P(j-1)'s registers while that wgmma still read them, and
            # ptxas serialized every wgmma of the kernel (note C7513).
            return (m_new, l_i * alpha + _row_reduce(p, "sum", *reduction),
                    p if fp8 else to_pv(p, j), alpha)

          if interpret:
            # Interpret mode: no register-operand wgmma (see `add_pv`).
            def qk(s_ref):
              plgpu.wgmma(s_ref, q_smem, k_t)
              sync.pass_turn()
              return s_ref[...]
            s = pl.run_scoped(qk, plgpu.ACC((bq, bk), jnp.float32))
            s = s if init is None else s + init
            acc = add_pv(acc, p_prev, prev)
            m_new, l_new, p16, alpha = softmax(
                s, None if ring is None else ring.load(slot, wg * bq, bq))
          else:
            def gemms_and_softmax(refs):
              o_ref, s_ref, *out_refs = refs
              plgpu.wgmma(s_ref, q_smem, k_t)  # S(j)
              v_prev = v_smems.at[prev]  # fp8: V^T, K-major as B
              plgpu.wgmma(o_ref, p_prev,  # O += P(j-1) V(j-1)
                          v_prev.transpose((1, 0)) if fp8 else v_prev)
              sync.pass_turn()
              bias16 = None  # the bias tile of S(j), read under its GEMM
              if ring is not None:
                bias16 = ring.load(slot, wg * bq, bq)
              with phase("S wait"):
                s = plgpu.wgmma_accumulator_load(s_ref, wait_n=1)  # S(j) only
              with phase("softmax"):
                for ref, value in zip(out_refs, softmax(s, bias16)):
                  ref[...] = value

            # placeholders: m, l, P(j) (fp8: f32, packed below), alpha
            outs = (m_i, l_i, zeros_s if fp8 else p_prev, m_i)
            with phase("GEMMs and softmax"):
              acc, _, m_new, l_new, p16, alpha = pl.run_state(
                  gemms_and_softmax)(
                      (plgpu.ACC.init(acc),
                       plgpu.ACC.init(zeros_s if init is None else init),
                       *outs))
          if fp8:
            with phase("pack P"):
              p16 = to_pv(p16, j)
          pl.when(j > 0)(lambda: sync.release(1, prev))
          acc = acc * lax.broadcast_in_dim(alpha, acc.shape, [0])
          return acc, m_new, l_new, p16

        def load_next_q():  # Q is no longer read: fetch the next item's
          if num_ctas:
            pl.when(i + 1 < num_items)(
                lambda: load_q(work_item(i + 1, lengths=False)))

        def in_turns(acc, m_i, l_i):
          """The item's steps (``step``), the consumers taking turns."""
          pl.when(n_steps > 0)(
              lambda: plgpu.barrier_wait(k_bars.at[slot_of(0)]))
          # Consumer c > 0 starts after consumer c - 1's first S GEMM is
          # issued: from here on the turn goes round.  Each consumer passes
          # it once per step; the last one's passes are one fewer than the
          # takes of consumer 0, the others' make up with a pass at the end.
          pl.when(wg != 0)(sync.take_turn)

          def idle_step(j, carry):
            """A step with no visible score for this consumer: every step
            where its rows all lie past the item's q_len (a CTA's last q
            tile when T is not whole C * bq tiles, or lengths), causal
            tiles past its rows' diagonal.  No GEMM, no softmax: the
            step's turns and slot releases, each after its slot's copy
            landed (that copy's load waited for the slot's previous
            release to complete, so the arrival joins this step's), and
            the TMA waits of ``step`` (later items' barrier phases in a
            persistent kernel)."""
            slot = slot_of(j)
            sync.pass_turn()
            sync.release(0, slot)
            plgpu.barrier_wait(v_bars.at[slot])
            if drop is not None:  # (its column keys come with V)
              plgpu.barrier_wait(key_bars.at[slot])
            sync.take_turn()
            pl.when(j + 1 < n_steps)(
                lambda: plgpu.barrier_wait(k_bars.at[slot_of(j + 1)]))
            sync.release(1, slot)
            return carry

          skip = skips_idle_steps(consumers, ring is not None,
                                  overlap_softmax)

          def steps(carry):
            # causal: the trailing masked tiles past this consumer's last
            # visible key (its rows' diagonal) hold no visible score
            last_tile = (q_base + bq - 1 + item.offset) // bk
            return run_steps(item, step, carry, alibi_tiles,
                             (last_tile, idle_step) if spec.is_causal
                             and skip else None)

          if skip:
            # (the idle branch first: Pallas lowers branches[0] twice)
            acc, m_i, l_i = lax.cond(
                q_base < item.q_len, steps,
                lambda carry: lax.fori_loop(0, n_steps, idle_step, carry),
                (acc, m_i, l_i))
          else:
            acc, m_i, l_i = steps((acc, m_i, l_i))
          load_next_q()
          pl.when(wg != last_wg)(sync.pass_turn)  # the next one's last take
          if num_ctas:
            # Before consumer w passes the turn again (the next item's first
            # S GEMM), consumer w + 1 must have taken this item's last pass:
            # a second bar.arrive would complete the barrier without it.  So
            # the last consumer passes once more and consumer 0 takes it:
            # 0's next pass then follows every consumer's last take (each
            # took before it passed), and so does each later pass.  The
            # overlap path below has this order built in (its first step
            # takes the turn).
            pl.when(wg == last_wg)(sync.pass_turn)
            pl.when(wg == 0)(sync.take_turn)
          return acc, m_i, l_i

        def overlapped(acc, m_i, l_i):
          """The item's steps with softmax overlap (``overlapped_step``),
          then the last O += P V."""
          # Turns cover whole GEMM-issue sections; consumer 0 goes first.
          # All consumers share n_steps: with no steps there is no turn.
          pl.when((wg == last_wg) & (n_steps > 0))(sync.pass_turn)
          if fp8:
            p0 = fp8_p(plgpu.layout_cast(jnp.zeros((bq, bk), jnp.float32),
                                         WGMMA), interpret)
          else:
            p0 = plgpu.layout_cast(jnp.zeros((bq, bk), dtype), WGMMA)
          acc, m_i, l_i, p_last = run_steps(item, overlapped_step,
                                            (acc, m_i, l_i, p0), alibi_tiles)
          load_next_q()

          def last_pv(acc):  # O += P(n-1) V(n-1)
            last = slot_of(n_steps - 1)
            pl.when(n_steps > 1)(lambda: plgpu.barrier_wait(v_bars.at[last]))
            sync.take_turn()
            acc = add_pv(acc, p_last, last)
            pl.when(wg != last_wg)(sync.pass_turn)  # the next one's last take
            sync.release(1, last)
            return acc

          return lax.cond(n_steps > 0, last_pv, lambda acc: acc, acc), m_i, l_i

        # -- FA-2 Alg. 1 lines 6-11 over the item's kv tiles
        acc, m_i, l_i = (overlapped if overlap_softmax else in_turns)(
            acc, m_i, l_i)

        # -- epilogue (Alg. 1 lines 12-15)
        if num_ctas or fp8:  # Q's buffer holds the next item's Q / is fp8
          out = (OUT_COLS, o_smems.shape[1],
                 lambda d: o_smems.at[wg, d % o_smems.shape[1]])
        else:  # Q is no longer read: its buffer takes O, one store
          out = (head_dim, 1, lambda d: q_smem)
        _epilogue(acc, m_i, l_i, item.q_len, q_base, rate, out_ref.dtype, out,
                  lambda cols: out_ref.at[b, pl.ds(q_base, bq), n, cols],
                  lse_smems.at[wg], lse_ref.at[b, n, pl.ds(q_base, bq)],
                  descale_ref[b, n, 1] if fp8 else None)
        return g0 + n_steps

      items.run(run_item)
      plgpu.wait_smem_to_gmem(0, wait_read_only=True)  # smem free: exit

    @pl.when(wg == consumers)
    def _producer():
      plgpu.set_max_registers(REGISTERS[consumers][1], action="decrease")
      _kv_producer(items, work_item, sync, group, bk, num_stages,
                   ((k_ref, v_ref), (k_smems, v_smems), (k_bars, v_bars)),
                   (1, drop.col_ref, key_smem, key_bars)
                   if drop is not None else None, v_transposed=fp8,
                   bias=ring, bias_kind=0 if bias_with_k else 1)

  pl.run_scoped(entry, *_scratch(dtype, head_dim, bq, bk, num_stages,
                                 consumers, num_ctas > 0, rate > 0.0,
                                 interpret, out_ref.dtype,
                                 None if bias_ref is None else bias_ref.dtype),
                collective_axes="wg")


def _kv_producer(items: schedule.Items, work_item, sync: Sync, group: int,
                 block_kv: int, num_stages: int, kv, keys,
                 v_transposed: bool = False, bias=None, bias_kind: int = 1):
  """The forward's producer warpgroup (FA-2 Alg. 1 line 7's loads of K_j
  and V_j): the K and V tiles [block_kv, H] of every step of the CTA's
  items into the ring (``load_kv_tiles``; ``kv``: (refs, smems, barriers)
  of K and V, ``keys``: its dropout column keys; ``v_transposed``: V^T's
  tiles [H, block_kv] instead, fp8; ``bias``: the ``BiasRing``), then a
  drain."""
  def run_item(i, g0):
    item = work_item(i, lengths=False)
    load_kv_tiles(item, group, block_kv, num_stages, sync, *kv, g0, keys,
                  v_transposed, bias, bias_kind)
    return g0 + item.n_steps

  steps = items.run(run_item)

  # Drain: match the consumers' release of the last slots, so that no
  # barrier is left mid-phase when the CTA exits.
  @pl.loop(jnp.maximum(0, steps - num_stages), steps)
  def _(g):
    slot = lax.rem(g, num_stages)
    sync.await_release(0, slot)
    sync.await_release(1, slot)


def _scratch(dtype, head_dim: int, bq: int, bk: int, num_stages: int,
             consumers: int, persistent: bool, dropout: bool,
             interpret: bool, out_dtype, bias_dtype=None):
  """(shared memory, barriers) of the forward kernel: Q [C, bq, H], the K
  and V rings [stages, bk, H] (fp8: V^T [stages, H, bk]), O's store slots
  (persistent or fp8), the LSE rows [C, bq] f32, dropout's column keys
  [stages, bk] int32, the bias ring (``bias_dtype``: ``BiasRing``, last);
  the TMA barriers (and in interpret mode stand-ins for ``Sync``'s named
  barriers).  Rows of 128 bytes are swizzled by 128 (tiles
  [8, 128 / itemsize]); fp8 head dim 64: 64-byte rows, swizzle 64."""
  fp8 = dtype == FP8

  def tiled(row_bytes):
    swizzle = min(128, row_bytes)
    cols = swizzle // jnp.dtype(dtype).itemsize
    return (plgpu.TilingTransform((8, cols)), plgpu.SwizzleTransform(swizzle))

  qk_tiled = tiled(head_dim * jnp.dtype(dtype).itemsize)
  out_tiled = (plgpu.TilingTransform((8, 64)), plgpu.SwizzleTransform(128))
  v_shape = (num_stages, head_dim, bk) if fp8 else (num_stages, bk, head_dim)
  smem = (
      plgpu.SMEM((consumers, bq, head_dim), dtype, transforms=qk_tiled),
      plgpu.SMEM((num_stages, bk, head_dim), dtype, transforms=qk_tiled),
      plgpu.SMEM(v_shape, dtype,
                 transforms=tiled(v_shape[-1] * jnp.dtype(dtype).itemsize)),
      # O store slots (persistent or fp8; else O reuses Q's buffer)
      plgpu.SMEM((consumers, out_slots(head_dim), bq, OUT_COLS), out_dtype,
                 transforms=out_tiled) if persistent or fp8 else (),
      plgpu.SMEM((consumers, bq), jnp.float32),
  )
  if dropout:  # dropout column keys, with V (``load_kv_tiles``)
    smem += (plgpu.SMEM((num_stages, bk), jnp.int32),)
  barriers = (
      plgpu.Barrier(num_barriers=consumers),  # Q loaded
      plgpu.Barrier(num_barriers=num_stages),  # K slot loaded
      plgpu.Barrier(num_barriers=num_stages),  # V slot loaded
  )
  if interpret:  # stand-ins for the named barriers (Sync)
    barriers += (
        plgpu.Barrier(num_arrivals=consumers, num_barriers=num_stages),  # K
        plgpu.Barrier(num_arrivals=consumers, num_barriers=num_stages),  # V
        plgpu.Barrier(num_barriers=consumers),  # turns
    )
  if dropout:  # dropout column keys landed
    barriers += (plgpu.Barrier(num_barriers=num_stages),)
  if bias_dtype is not None:
    bias_smem, bias_bars = BiasRing.scratch(num_stages, consumers * bq, bk,
                                            bias_dtype)
    smem, barriers = smem + (bias_smem,), barriers + (bias_bars,)
  return smem, barriers


# --------------------------------------------------------------------------
# Wrapper
# --------------------------------------------------------------------------


def tile_table(spec: masks.MaskSpec, arrays: masks.MaskArrays, dense, q_len,
               kv_len, offset, num_tiles: int, num_other_tiles: int,
               rows: int, block: int, kv_major: bool = False):
  """[B, num_tiles, 8] int32: for each work item of ``rows`` rows, the
  (first, full_first, full_last, last) tiles of ``block`` rows along the
  other axis, then (q_len, kv_len, diagonal offset, 0) of the batch row.

  Query-major (the forward, the dQ pass): items are q tiles, the loop runs
  over kv tiles (``masks.kv_bounds``).  ``kv_major`` (the dK/dV pass): items
  are kv tiles, the loop runs over q tiles (``masks.q_bounds``).
  Tiles in [first, full_first) and [full_last, last) get the element-wise
  mask; [full_first, full_last) none; tiles outside [first, last) are skipped.
  One array, so that XLA computes it in one small fusion before the kernel
  (each extra launch costs microseconds, a visible share of a short call).
  """
  start = jnp.arange(num_tiles, dtype=jnp.int32)[None, :] * rows  # [1, I]
  own_len = kv_len if kv_major else q_len  # items past it: no work (below)
  # (key rows past kv_len are no padding to the dK/dV kernel: P^T of a real
  # query row against them is not 0; query rows past q_len have lse = +inf)
  bounds = masks.item_bounds(spec, start, rows, q_len[:, None],
                             kv_len[:, None], offset[:, None], kv_major)
  first, last, full_first, full_last = masks.tile_range(*bounds, block)
  overlap = None  # [B or 1, I, J]: may the pair of tiles hold a visible pair?
  if spec.has_segments:
    # Skip leading / trailing tiles that share no segment with the item.
    own, other = arrays.q_segment_ids, arrays.kv_segment_ids
    if kv_major:
      own, other = other, own
    i_lo, i_hi = masks.segment_tile_ranges(own, rows)
    j_lo, j_hi = masks.segment_tile_ranges(other, block)
    i_lo, i_hi = i_lo[:, :num_tiles], i_hi[:, :num_tiles]
    j_lo, j_hi = j_lo[:, :num_other_tiles], j_hi[:, :num_other_tiles]
    overlap = ((j_lo[:, None, :] <= i_hi[:, :, None])
               & (i_lo[:, :, None] <= j_hi[:, None, :]))
  if dense is not None:
    # ... and those where the dense mask (any head) is all False.
    bm, nm, tp, sp = dense.shape
    if kv_major:
      any_vis = dense.reshape(bm, nm, tp // block, block, sp // rows,
                              rows).any(axis=(1, 3, 5)).swapaxes(1, 2)
    else:
      any_vis = dense.reshape(bm, nm, tp // rows, rows, sp // block,
                              block).any(axis=(1, 3, 5))
    overlap = any_vis if overlap is None else overlap & any_vis
  if overlap is not None:
    jt = jnp.arange(overlap.shape[-1], dtype=jnp.int32)
    seg_first = jnp.min(jnp.where(overlap, jt, num_other_tiles), axis=-1)
    seg_last = jnp.max(jnp.where(overlap, jt + 1, 0), axis=-1)
    first = jnp.maximum(first, seg_first)
    last = jnp.maximum(jnp.minimum(last, seg_last), first)
  if spec.needs_elementwise:  # segments / dense mask: every tile is masked
    full_first = full_last = last
  last = jnp.where(start < own_len[:, None], last, first)  # no rows: no work
  full_first = jnp.clip(full_first, first, last)
  full_last = jnp.clip(full_last, full_first, last)
  lens = (q_len[:, None], kv_len[:, None], offset[:, None],
          jnp.zeros_like(first))
  table = jnp.broadcast_arrays(first, full_first, full_last, last, *lens)
  return jnp.stack(table, axis=-1).astype(jnp.int32)


def mask_inputs(spec: masks.MaskSpec, arrays: masks.MaskArrays, t: int,
                s: int, tp: int, sp: int):
  """(q_len [B], kv_len [B], diagonal offset [B], dense mask or None) as the
  kernels read them: lengths clipped to [0, T] / [0, S]; the dense mask as
  int8 [Bm, Nm, Tp, Sp], T and S broadcast out (the kernels read tiles), B
  and N kept at 1 when broadcast, padding "not visible"."""
  q_len = jnp.clip(arrays.q_len.astype(jnp.int32), 0, t)
  kv_len = jnp.clip(arrays.kv_len.astype(jnp.int32), 0, s)
  offset = masks.diagonal_offset(spec, q_len, kv_len,
                                 arrays.diagonal_shift).astype(jnp.int32)
  dense = None
  if spec.dense_mask_shape is not None:
    m = arrays.mask
    m = jnp.broadcast_to(m, (m.shape[0], m.shape[1], t, s)).astype(jnp.int8)
    dense = jnp.pad(m, ((0, 0), (0, 0), (0, tp - t), (0, sp - s)))
  return q_len, kv_len, offset, dense


def padded_segments(arrays: masks.MaskArrays, tp: int, sp: int):
  """[q_seg [B, Tp], kv_seg [B, Sp]] int32, padding tokens -1."""
  pad = lambda ids, to: jnp.pad(ids.astype(jnp.int32),
                                ((0, 0), (0, to - ids.shape[1])),
                                constant_values=-1)
  return [pad(arrays.q_segment_ids, tp), pad(arrays.kv_segment_ids, sp)]


def forward(q, k, v, arrays: masks.MaskArrays, params: KernelParams,
            descales=None):
  """Returns (out [B, T, N, H] q.dtype, lse [B, N, T] f32, +inf fully masked).

  fp8 (q, k, v float8_e4m3fn): ``descales`` = (q_descale * k_descale,
  v_descale), float32 [B, K] each (``_dispatch.validate_descales``; > 0 or
  NaN); out is bfloat16.  Both GEMMs run in e4m3 with f32 accumulators
  (wgmma m64nNk32).  fp8 wgmma takes only K-major operands, so V is
  transposed to V^T [B, K, H, S] before the kernel (``v_transpose``: one
  extra pass over V, its keys in ``fp8_key_order``), and its tiles
  [H, block_kv] are the P V GEMM's B operand."""
  check_supported(params, q, k, v, arrays)
  fp8 = jnp.dtype(q.dtype) == FP8
  if fp8 != (descales is not None):
    raise ValueError("descales go with float8_e4m3fn q, k, v, and only then")
  spec = params.spec
  b, t, n, h = q.shape
  _, s, kh, _ = k.shape
  hp, cfg = _config(params, q, k, arrays)
  bq, bk = cfg.block_q, cfg.block_kv
  rows = cfg.consumers * bq
  tp, sp = round_up(t, rows), round_up(s, bk)
  num_q_tiles, num_kv_tiles = tp // rows, sp // bk

  # Zero padding: head dim (q.k and p.v unchanged, extra columns sliced off),
  # T (rows sliced off), S (keys past kv_len are masked).  T in whole 8-row
  # tiles is not padded: TMA reads the query rows past T as zeros and drops
  # their O stores (its tiled copies clip each dim; Mosaic GPU's copies take
  # T in whole 8-row tiles).  LSE keeps tp rows: its unswizzled [bq] f32
  # stores are contiguous, and Mosaic GPU issues those as a plain bulk copy
  # bounded only by the whole array's end, so rows past T would land in the
  # next head's (interpret mode clips them per dim and cannot show it).
  tq = t if t % 8 == 0 else tp  # the rows of q and out
  if (tq, hp) != (t, h):
    q = jnp.pad(q, ((0, 0), (0, tq - t), (0, 0), (0, hp - h)))
  if (sp, hp) != (s, h):
    k = jnp.pad(k, ((0, 0), (0, sp - s), (0, 0), (0, hp - h)))
    v = jnp.pad(v, ((0, 0), (0, sp - s), (0, 0), (0, hp - h)))
  if fp8:
    v = v_transpose.transposed(v, params.interpret)  # V^T [B, K, Hp, Sp]

  q_len, kv_len, offset, dense = mask_inputs(spec, arrays, t, s, tp, sp)
  tiles = tile_table(spec, arrays, dense, q_len, kv_len, offset, num_q_tiles,
                     num_kv_tiles, rows, bk)
  operands = [q, k, v, tiles]  # + the persistent schedule, below
  if spec.has_segments:
    operands += padded_segments(arrays, tp, sp)
  if dense is not None:
    operands.append(dense)
  alibi = arrays.alibi_slopes is not None
  if alibi:
    operands.append(alibi_slopes(arrays, b))
  if fp8:  # per query head: (q_descale * k_descale, v_descale) [B, N, 2]
    operands.append(jnp.repeat(jnp.stack(descales, axis=-1).astype(
        jnp.float32), n // kh, axis=1))
  rate = params.dropout_rate
  if rate > 0.0:
    operands += dropout_keys(arrays, tp, sp)
  bias = arrays.bias is not None
  if bias:
    operands.append(BiasRing.operand(arrays.bias, tp, sp))

  num_items = n * num_q_tiles * b
  num_ctas = 0  # persistent: one CTA per SM
  if cfg.persistent:
    num_ctas = persistent_ctas(num_items, params.interpret)
  hg = n  # heads per group of the launch order
  if num_ctas and cfg.heads_inner:
    # Groups of heads whose K/V fit head_group_mib, q tiles slowest within
    # a group: the items running at once read few heads' K/V, which L2
    # holds.  (Without groups they read every head's K/V from HBM; at the
    # power cap that cost the clock 14%: H200, session 4, history at
    # commit 29bf24f.)
    # K/V bytes per query head
    kv_bytes = 2 * b * sp * hp * jnp.dtype(q.dtype).itemsize * kh // n
    hg = schedule.heads_per_group(n, kv_bytes, cfg.head_group_mib)
  order = schedule.launch_order(b, n, num_q_tiles, cfg.heads_inner, hg)
  if num_ctas:  # each CTA's items (schedule.py), work from the masks
    _, _, qt = schedule.item_of(schedule.decode(np.arange(num_items), order),
                                order, num_q_tiles, spec.is_causal)
    skips = skips_idle_steps(cfg.consumers, bias, cfg.overlap_softmax)
    steps = (schedule.consumer_steps(spec, t, s, bq, cfg.consumers, bk,
                                     num_q_tiles) if skips else
             schedule.tile_steps(spec, t, s, rows, bk, num_q_tiles))
    operands.insert(4, jnp.asarray(
        schedule.list_schedule(steps[qt], num_ctas, longest_first=skips)))
  kernel = functools.partial(
      _attention_kernel, spec=spec, scale=float(params.scale),
      cap=params.logits_soft_cap, block_q=bq, block_kv=bk,
      num_stages=cfg.num_stages, consumers=cfg.consumers,
      num_q_tiles=num_q_tiles, group=n // kh,
      longest_first=spec.is_causal, masked_first=cfg.masked_first,
      overlap_softmax=cfg.overlap_softmax, order=order, num_ctas=num_ctas,
      alibi=alibi, rate=rate, interpret=params.interpret, bias=bias,
      row_tree=cfg.row_tree, alibi_fma_keys=cfg.alibi_fma_keys,
      reduce_ilp=cfg.reduce_ilp, bias_with_k=cfg.bias_with_k)
  kernel.__name__ = "pallas_flash_mosaic_fwd"
  if num_ctas:
    grid, grid_names = (num_ctas,), ("cta",)
  else:
    grid = tuple(size for _, size in order)
    grid_names = tuple(name for name, _ in order)
  out, lse = plgpu.kernel(
      kernel,
      out_type=(jax.ShapeDtypeStruct((b, tq, n, hp),
                                     jnp.bfloat16 if fp8 else q.dtype),
                jax.ShapeDtypeStruct((b, n, tp), jnp.float32)),
      grid=grid,
      grid_names=grid_names,
      num_threads=cfg.consumers + 1,
      thread_name="wg",
      # No automatic warpgroup barriers around shared-memory stores (the only
      # ones are the epilogue's, ordered by commit_smem) and no cross-warp
      # reduction scratch (all reductions are along WGMMA rows, within a warp).
      compiler_params=plgpu.CompilerParams(
          approx_math=True, unsafe_no_auto_barriers=True,
          reduction_scratch_bytes=0),
      interpret=plgpu.InterpretGPUParams() if params.interpret else None,
  )(*operands)
  return out[:, :t, :, :h], lse[:, :, :t]
