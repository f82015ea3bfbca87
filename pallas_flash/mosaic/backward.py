"""FlashAttention backward for Hopper, written in Pallas Mosaic GPU.

Letters: B batch, T query length, S key/value length, N query heads,
K key/value heads (G = N // K), H head dim.  Layout [B, T, N, H].

FlashAttention-2 Alg. 2 with the warp-specialised structure of the forward
(FA3, Shah et al. 2024, Sec. 3.1): one producer warpgroup issues TMA copies
into a ``num_stages``-deep shared-memory ring, C consumer warpgroups run the
GEMMs on the tensor cores (wgmma, f32 accumulators).  Two kernels, so that
every gradient is summed in registers in a fixed order (bitwise
deterministic, no atomics), or with ``fused`` one (``_DsTiles``,
``to_fixed``):

* **dK/dV** (grid (K, kv tiles, B)): a CTA holds ``C * block_kv`` rows of K
  and V of one kv head (each consumer ``block_kv`` of them, loaded once) and
  loops over the G query heads of that kv head and, for each, over the query
  tiles that can see its keys; the producer streams Q and dO tiles
  ``[block_q, H]``.  Per step, key-major so no tile needs a transpose:

      S^T  = K Q^T,  dP^T = V dO^T          [block_kv, block_q], issued together
      P^T  = exp2(S^T * scale * log2 e - lse2)        (Alg. 2 line 11)
      dV  += P^T dO                         [block_kv, H]   (line 12)
      dS^T = P^T * (dP^T - delta)                     (line 14)
      dK  += dS^T Q                         [block_kv, H]   (line 16)

  GQA: dK/dV of a kv head are summed over its query heads in registers.
* **dQ** (grid (N, q tiles, B)): a CTA holds ``C * block_q`` rows of Q and dO
  of one head; the producer streams K and V tiles ``[block_kv, H]``:

      S = Q K^T, dP = dO V^T   [block_q, block_kv];   dQ += dS K   (line 15)

delta = rowsum(dO * O) (Alg. 2 line 4) is one O(N) XLA fusion before the
kernels.

Dropout (``DropoutTiles``: the forward's keep bits Z, regenerated per
tile from the row / column keys, nothing N x N stored), in the form of the
Triton backward (``triton/backward.py``): with r = 1 / (1 - rate),
dV += r (Z P)^T dO and dS = r P * (Z dP - delta'), delta' = (1 - rate)
delta scaled once in XLA.  The dQ kernel's dP GEMM starts at -delta' as
without dropout, so Z dP - delta' is a select between that accumulator and
its init.  The dK/dV kernel (two-kernel and fused) instead takes
dS^T / r = (Z P^T) dP^T - P^T delta' from the Z P^T that dV needs anyway and
a dP^T GEMM started at 0: a multiply and a multiply-add per score in place
of a second select (H100 runs 154-155, 2026-11-24, fwd+bwd +1.8% at S16k C,
+3.7% at S16k N, level at S4k; history at commit 29bf24f).
r leaves the loops (dK, dV, dQ scaled once in the epilogue).

A bias (float16 / bfloat16 with full query and key dims, [1 | B, 1 | N, T,
S]; the two kernels, not ``split_head_dim``): both kernels read the bias
tile of each step through their producer's TMA ring (``BiasRing``): the
dK/dV kernel's beside Q / dO, consumer w's [block_q_dkv, block_kv_dkv] tile
of the step's rows against its keys, loaded transposed into S^T's layout;
the dQ kernel's beside V, the forward's [C * block_q, block_kv] tiles.  It
joins the scores where the forward adds it (after the scale and soft-cap,
beside ALiBi, before the mask): into S's accumulator init where the row
terms are folded there (``_bias_terms``).  With ``params.bias_grad`` the
dQ kernel writes dbias = dS of the logits (line 14's dS before the
soft-cap's factor) tile by tile, zeros where it skips (``_DbiasTiles``).

Both kernels visit exactly the tiles the forward did: their tile tables come
from ``forward.tile_table`` (``masks.kv_bounds`` /
``masks.q_bounds``), edge tiles get the element-wise mask of ``masks``, the
rest none.  Fully masked rows carry lse = +inf, so P = 0 there and their
gradients are 0.
"""
from __future__ import annotations

import functools
import math

import jax
from jax import lax
import jax.experimental.pallas as pl
import jax.experimental.pallas.mosaic_gpu as plgpu
import jax.numpy as jnp
import numpy as np

from pallas_flash import masks
from pallas_flash.mosaic import forward as fwd
from pallas_flash.mosaic import schedule
from pallas_flash.mosaic.config import MosaicBackwardConfig, MosaicConfig
from pallas_flash.mosaic.pipeline import (
    BAR_TURN, COL, REGISTERS, ROW, WGMMA, WG_THREADS, Item, Sync, load_kv_tiles,
    named_barrier, run_steps)
from pallas_flash.mosaic.score_tiles import (
    AlibiTile, BiasRing, DropoutTiles, alibi_slopes, alibi_split, copy_row_pair,
    dense_tile, dropout_keys, folds_alibi, mask_refs, query_tile_visible,
    segment_ids, tile_visible)
from pallas_flash.params import KernelParams, row_delta

_LOG2E = math.log2(math.e)
_TILED = (plgpu.TilingTransform((8, 64)), plgpu.SwizzleTransform(128))


def _config(params: KernelParams, q, arrays: masks.MaskArrays | None
            ) -> tuple[int, MosaicBackwardConfig]:
  """(padded head dim, the backward config: given or the table's default)."""
  hp = fwd.round_up(q.shape[-1], 64)
  cfg = params.config.backward if isinstance(params.config,
                                             MosaicConfig) else None
  if cfg is None:
    cfg = MosaicBackwardConfig.default(
        hp, params.spec.is_causal, params.dropout_rate > 0.0,
        alibi=arrays is not None and arrays.alibi_slopes is not None,
        soft_cap=params.logits_soft_cap is not None,
        deterministic=params.deterministic)
    if fwd.bias_itemsize(arrays):  # the two kernels, room for the bias
      cfg = cfg.with_bias(hp, fwd.bias_itemsize(arrays))
  if cfg.split_head_dim:  # each consumer's share of columns: 64s
    hp = fwd.round_up(hp, 64 * cfg.consumers)
  return hp, cfg


def check_supported(params: KernelParams, q, k, v,
                    arrays: masks.MaskArrays | None = None) -> None:
  """Raises NotImplementedError for valid input this backward cannot take."""
  if jnp.dtype(q.dtype) == fwd.FP8:
    raise NotImplementedError("the mosaic backward takes no float8_e4m3fn "
                              "input (the fp8 path is forward only)")
  fwd.check_supported(params, q, k, v)  # dtype, device, config type
  fwd.check_bias(arrays, q, k, fp8=False)  # what the bias rings read
  hp, cfg = _config(params, q, arrays)
  bias = fwd.bias_itemsize(arrays)
  if bias and (cfg.one_kernel or cfg.split_head_dim):
    raise NotImplementedError(
        f"the mosaic backward takes a bias in its two-kernel form only, not "
        f"fused, deterministic=False or split_head_dim (head_dim="
        f"{q.shape[-1]}: {cfg}; the dispatcher falls back to the triton "
        "backward)")
  if hp > 128 and not cfg.split_head_dim:
    # dK and dV accumulators of [64, hp] f32 take hp registers per thread.
    raise NotImplementedError(
        f"mosaic backward takes head_dim={q.shape[-1]} > 128 only with "
        "MosaicBackwardConfig(split_head_dim=True) (the dispatcher falls "
        "back to the triton backward)")
  if cfg.one_kernel and cfg.block_q_dkv < 64 * cfg.consumers and (
      hp // cfg.consumers) % 64:
    raise NotImplementedError(
        f"the fused MosaicBackwardConfig at head_dim={hp} needs "
        f"block_q_dkv={64 * cfg.consumers} (its dQ share splits by rows) or "
        "a head dim of 64 columns per consumer")
  smem = cfg.smem_bytes(hp, bias_itemsize=bias)
  if smem > 227 * 1024:
    raise NotImplementedError(f"{cfg} needs {smem} bytes of shared memory "
                              f"at head_dim={hp}"
                              f"{' with a bias' if bias else ''}")


# --------------------------------------------------------------------------
# Shared pieces of the two kernels
# --------------------------------------------------------------------------


def _scores(terms, interpret: bool, on_first=None, n_first: int = 1):
  """(init + sum of a @ b over products for each (products, init) in terms)
  in f32, the (a, b) operands in shared memory (``_RowTile.products``), the
  wgmmas issued back to back.  The inits fold the softmax's row terms into
  the accumulators (``_row_terms``).

  ``on_first(acc)`` -> a tuple of ``n_first`` f32 tiles of the first
  accumulator's shape: run on it as soon as its wgmmas are done, while the
  later ones are in flight (FA3 Sec. 3.2's intra-warpgroup overlap, in
  the backward: P from S while the dP GEMM runs); its tiles replace the
  first result.  Without it, all are awaited once."""
  def issue(refs):
    for ref, (products, _) in zip(refs, terms):
      for a, b in products:
        plgpu.wgmma(ref, a, b)

  n = len(terms)
  if interpret:  # no pl.run_state accumulators in GPU interpret mode
    def body(*refs):
      issue(refs)
      return tuple(ref[...] for ref in refs)
    outs = pl.run_scoped(body, *(plgpu.ACC(init.shape, jnp.float32)
                                 for _, init in terms))
    outs = tuple(out + init for out, (_, init) in zip(outs, terms))
    return outs if on_first is None else (on_first(outs[0]), *outs[1:])
  accs = tuple(plgpu.ACC.init(init) for _, init in terms)
  if on_first is None:
    return pl.run_state(issue)(accs)
  later = sum(len(products) for products, _ in terms[1:])
  first_shape = terms[0][1].shape

  def body(refs):
    acc_refs, out_refs = refs[:n], refs[n:]
    issue(acc_refs)
    first = plgpu.wgmma_accumulator_load(acc_refs[0], wait_n=later)
    for ref, value in zip(out_refs, on_first(first)):
      ref[...] = value

  zeros = plgpu.layout_cast(jnp.zeros(first_shape, jnp.float32), WGMMA)
  _, *rest_and_outs = pl.run_state(body)((*accs, *(zeros,) * n_first))
  return (tuple(rest_and_outs[n - 1:]), *rest_and_outs[:n - 1])


def _row_terms(lse2, delta, shape, dim: int, scale: float,
               cap: float | None):
  """Accumulator inits for S and dP (``_scores``) and a function of the
  S accumulator -> (base-2 logits, tanh of the soft-cap or None,
  the lse2 still to subtract or None).

  dP starts at -delta, so the GEMM yields dP - delta (Alg. 2 line 14).
  Without a soft-cap and with scale > 0, S starts at -lse2 / c
  (c = scale * log2 e), so c * acc = c * S - lse2 is already the exponent of
  P (line 11): the GEMMs do the subtractions, and no broadcast row term
  stays live next to the score tiles.  lse2 = +inf (a fully masked or
  padded row) gives -inf, P = 0."""
  bcast = lambda x: plgpu.layout_cast(lax.broadcast_in_dim(x, shape, [dim]),
                                      WGMMA)
  c = scale * _LOG2E
  if _folds_rows(scale, cap):
    return (bcast(-lse2 / c), bcast(-delta),
            lambda acc: (acc * c, None, None))
  zeros = plgpu.layout_cast(jnp.zeros(shape, jnp.float32), WGMMA)
  return zeros, bcast(-delta), lambda acc: (*_logits2(acc, scale, cap),
                                            bcast(lse2))


def _folds_rows(scale: float, cap: float | None) -> bool:
  """Whether ``_row_terms`` starts S's accumulator at -lse2 / c."""
  return cap is None and scale > 0


def _bias_terms(s_init, bias, scale: float, cap: float | None):
  """A step's bias tile in its score terms, added where the forward adds
  it (``forward._tile_softmax``: after the scale and soft-cap, beside
  ALiBi, before the mask).  ``bias()``: the tile in the bias dtype, in the
  layout of the score tile (None: no bias).  Where ``_row_terms`` folds
  the rows into S's accumulator, the tile joins its init: acc = S +
  bias / scale - lse2 / c, so c * acc = c * S + bias log2 e - lse2, and no
  tile of it stays live beside the score tiles; else a callable giving it
  in base 2 for ``_probs``, read once S is done.  Returns (S's init, that
  callable or None)."""
  if bias is None:
    return s_init, None
  if _folds_rows(scale, cap):
    return s_init + bias().astype(jnp.float32) * (1.0 / scale), None
  return s_init, lambda: BiasRing.logits(bias())


def _accumulate(accs, products, interpret: bool, then=None, then_init=()):
  """acc_i += sum of a @ b_ref over product_i() for (a in registers or
  shared memory, b_ref in shared memory); ``products`` are callables run in
  order, each returning a list of (a, b_ref), so a later A operand is
  computed while the earlier wgmmas are in flight; ``then()`` runs once all
  are issued (split_head_dim: consumer 0 stores the operands it issued
  from registers for consumer 1; loads for the next step), its results (of
  ``then_init``'s shapes and layouts) returned after the accumulators; all
  are awaited once."""
  if interpret:
    # GPU interpret mode models neither a register operand of wgmma nor
    # pl.run_state accumulators: the same products as plain dots.
    out = []
    for acc, product in zip(accs, products):
      for a, b_ref in product():
        a = a if isinstance(a, jax.Array) else a[...]
        acc = acc + jnp.dot(a, b_ref[...], preferred_element_type=jnp.float32)
      out.append(acc)
    extra = then() if then is not None else None
    return (*out, *(extra if then_init else ()))

  def body(refs):
    acc_refs, out_refs = refs[:len(accs)], refs[len(accs):]
    for acc_ref, product in zip(acc_refs, products):
      for a, b_ref in product():
        plgpu.wgmma(acc_ref, a, b_ref)
    if then is not None:
      extra = then()
      for ref, value in zip(out_refs, extra if then_init else ()):
        ref[...] = value
  return pl.run_state(body)((*(plgpu.ACC.init(a) for a in accs),
                             *then_init))


class _Stagger:
  """``cfg.stagger_consumers``: consumer w > 0 starts its first step once
  consumer w - 1's first score GEMMs are done, so the consumers run half a
  step apart: one's score GEMMs under the other's softmax, as FA3's
  ping-pong (Sec. 3.1) does in the forward with a barrier per step; here
  once, the ring keeping the offset afterwards.  The backward takes no
  turns, so the turn barriers are free for it.  In the fused kernel the dQ
  share's one-step lag (``_DsTiles``) lets the consumers run apart too."""

  def __init__(self, sync, cfg: MosaicBackwardConfig, w):
    self.sync, self.w, self.c = sync, w, cfg.consumers
    self.on = cfg.stagger_consumers and not cfg.split_head_dim

  def wait(self, i):
    """Before step i's score GEMMs (i: the CTA's step, over all its items):
    at step 0, wait for w - 1's ``go``."""
    if self.on:
      pl.when(jnp.logical_and(self.w > 0, i == 0))(self.sync.take_turn)

  def go(self, i):
    """Right after step i's score GEMMs: at step 0, let w + 1 start."""
    if self.on:
      pl.when(jnp.logical_and(self.w < self.c - 1, i == 0))(
          self.sync.pass_turn)


def _logits2(s, scale: float, cap: float | None):
  """Scores -> base-2 logits (scale, soft-cap, x log2 e) and the soft-cap's
  tanh (None without a cap), whose derivative dS picks up."""
  if cap is None:
    return s * (scale * _LOG2E), None
  th = jnp.tanh(s * (scale / cap))
  return th * (cap * _LOG2E), th


def _ds(p, dp_minus_delta, th, plus=None, with_logits: bool = False):
  """dS = P * (dP - delta) (Alg. 2 line 14), through the soft-cap's tanh;
  the softmax scale is applied once to dK / dQ at the end.  ``plus``: a
  tile added to the product (dropout's -P delta' in the dK/dV kernel).
  ``with_logits``: (dS, dS of the logits before the soft-cap's factor,
  which is dbias)."""
  ds = p * dp_minus_delta if plus is None else p * dp_minus_delta + plus
  logits_grad = ds
  if th is not None:
    ds = ds * (1.0 - th * th)
  return (ds, logits_grad) if with_logits else ds


def _probs(s, *, logits, visible, alibi, fold: bool, bias=None):
  """P = exp2(x - lse2) (Alg. 2 line 11) of a score tile: S [bq, bk] in the
  dQ kernel, S^T [bk, bq] (P^T) in the dK/dV kernel.  ``logits(s)`` -> (x,
  the soft-cap's tanh or None, what is left to subtract or None:
  ``_row_terms``), then ALiBi (``alibi``: the tile's ``AlibiTile.add_rest``
  where folded, else its ``full``, or None), then the bias (``bias``: a
  callable giving its tile in base 2, ``_bias_terms``, or None), then the
  mask (``visible``: a callable giving the tile's visible entries, or
  None).  lse2 = +inf on fully masked rows gives 0, as does a -inf bias.
  Returns (P,) or (P, tanh)."""
  x, th, lse2_left = logits(s)
  if alibi is not None:
    x = alibi(x, 1.0) if fold else x + alibi()
  if bias is not None:
    x = x + bias()
  if visible is not None:
    x = jnp.where(visible(), x, masks.MASK_VALUE)
  p = jnp.exp2(x if lse2_left is None else x - lse2_left)
  return (p,) if th is None else (p, th)


class _RowTile:
  """The rows a CTA keeps for its whole life (dK/dV kernel: K and V; dQ
  kernel: Q and dO), as consumer ``w`` sees them.

  Without ``split_head_dim``: consumer w's own [block, H] tile, one of a
  [buffers * C, block, H] array (w traced; set ``buf`` of the persistent
  dK/dV kernel's two, ``MosaicBackwardConfig.kv_buffers``, from buf * C).
  With it: one [block, H] tile shared by all consumers, held as C column
  blocks [block, H / C] (separate allocations, w static); consumer w loads
  block w, reads all of them in the score GEMMs, and owns columns
  w * H / C .. of the gradients.
  """

  def __init__(self, cfg: MosaicBackwardConfig, w, smems, bars, item_tile,
               block: int, index, buf=0):
    """``item_tile``: the CTA's tile along the rows; ``index(rows)``: the
    HBM index (b, rows, head) of rows ``rows``."""
    self.split = cfg.split_head_dim
    first = item_tile * (cfg.row_tiles * block)
    if not self.split:
      first += w * block
    self.first = first  # the tile's first row
    self.rows = index(pl.ds(first, block))
    if self.split:  # (smem block, barrier) of each column block, all read
      self.all = [list(zip(blocks, bs)) for blocks, bs in zip(smems, bars)]
      own = [blocks[w] for blocks in self.all]
    else:  # this consumer's own tile only
      w = lax.axis_index("wg")  # (traced even where the role branch is not)
      tile = buf * cfg.consumers + w
      self.all = [[(ref.at[tile], bar.at[tile])]
                  for ref, bar in zip(smems, bars)]
      own = [blocks[0] for blocks in self.all]
    self.regs = {}  # row tile i -> its registers (``wait``)
    self.smems = [smem for smem, _ in own]
    self._own_bars = [bar for _, bar in own]
    self.width = self.smems[0].shape[-1]
    self.cols = pl.ds(w * self.width, self.width) if self.split else None

  @staticmethod
  def allocate(cfg: MosaicBackwardConfig, rows: int, head_dim: int, dtype,
               buffers: int = 1):
    """(smem, barriers) for ``pl.run_scoped``: two arrays of row tiles."""
    c = cfg.consumers
    if cfg.split_head_dim:
      smem = tuple(plgpu.SMEM((rows, head_dim // c), dtype, transforms=_TILED)
                   for _ in range(c))
      bars = tuple(plgpu.Barrier() for _ in range(c))
    else:
      smem = plgpu.SMEM((buffers * c, rows, head_dim), dtype,
                        transforms=_TILED)
      bars = plgpu.Barrier(num_barriers=buffers * c)
    return (smem, smem), (bars, bars)

  def narrow(self, x):
    """x: a [rows, H] ring tile or an HBM index tuple, narrowed to this
    consumer's gradient columns."""
    if self.cols is None:
      return x
    return (*x, self.cols) if isinstance(x, tuple) else x.at[:, self.cols]

  def load(self, *srcs):
    """TMA copies of this consumer's part of each array from HBM."""
    for src, dst, bar in zip(srcs, self.smems, self._own_bars):
      plgpu.copy_gmem_to_smem(src.at[self.narrow(self.rows)], dst, bar)

  def wait(self, in_registers: int = 0, interpret: bool = False):
    """Wait for the row tiles; then load the first ``in_registers`` of
    them (not split) into registers, where ``products`` takes them as the
    wgmma's A operand instead of reading shared memory every step.
    (Interpret mode models no register A operand: it keeps the refs.)"""
    for tile in self.all:
      for _, bar in tile:
        plgpu.barrier_wait(bar)
    if not interpret:
      for i in range(in_registers):
        self.regs[i] = plgpu.load(self.all[i][0][0], layout=WGMMA)

  def products(self, i: int, ring_tile):
    """(A, B) operands of (row tile i) @ ring_tile^T, summed over column
    blocks: the score GEMMs S^T = K Q^T, dP^T = V dO^T or S = Q K^T,
    dP = dO V^T."""
    if i in self.regs:
      return [(self.regs[i], ring_tile.transpose((1, 0)))]
    out = []
    for block, _ in self.all[i]:
      b_op = ring_tile if not self.split else ring_tile.at[
          :, pl.ds(len(out) * self.width, self.width)]
      out.append((block, b_op.transpose((1, 0))))
    return out

  def store(self, i: int, acc, dst, dtype):
    """Gradient columns acc -> this consumer's smem part of array i (no
    wgmma reads it any more) -> HBM ``dst`` at the tile's rows."""
    _store_rows(acc, self.smems[i], dst.at[self.narrow(self.rows)], dtype)


class _Exchange:
  """Score tiles passed between the two consumers of a ``split_head_dim``
  CTA, so that each score GEMM runs once: consumer 1 computes dP - delta and
  hands it to consumer 0 (direction 0); consumer 0 computes S, P and dS
  (Alg. 2 lines 9-14) and hands dS, and in the dK/dV kernel P, back
  (direction 1) as wgmma A operands, storing them only once its own GEMMs
  on them (A from registers) are issued.  Each consumer accumulates its
  own columns of the gradients.  One shared-memory buffer set per
  direction, each guarded by a "full" and a "free" barrier (GPU: named
  barriers of the two consumers' 256 threads; interpret: mbarriers).
  """

  def __init__(self, bufs, cfg: MosaicBackwardConfig, mbarriers, steps):
    self.bufs = bufs  # ((dp f32,), (p?, ds)) [rows, cols] tiles
    # The named barriers after pipeline.Sync's (config: num_stages <= 3).
    self.first_id = BAR_TURN + cfg.consumers + 2 * cfg.num_stages
    self.mbarriers, self.steps = mbarriers, steps

  @staticmethod
  def allocate(shape, dtype, with_p: bool):
    f32 = plgpu.SMEM(shape, jnp.float32, transforms=(
        plgpu.TilingTransform((8, 32)), plgpu.SwizzleTransform(128)))
    back = plgpu.SMEM(shape, dtype, transforms=_TILED)
    return ((f32,), (back, back) if with_p else (back,))

  def _barrier(self, op: str, d: int, full: bool):
    i = 2 * d + (0 if full else 1)
    if self.mbarriers is None:
      named_barrier("arrive" if op == "arrive" else "sync",
                    self.first_id + i, 2 * WG_THREADS)
    elif op == "arrive":
      plgpu.barrier_arrive(self.mbarriers.at[i])
    else:
      plgpu.barrier_wait(self.mbarriers.at[i])

  def put(self, d: int, first, *values):
    """Writer: wait until the reader took the previous tiles (unless this is
    the ``first`` step), store these."""
    pl.when(jnp.logical_not(first))(
        lambda: self._barrier("wait", d, full=False))
    for ref, value in zip(self.bufs[d], values):
      ref[...] = value
    if d == 1:  # read by wgmma: the async proxy must see the stores
      plgpu.commit_smem()
    self._barrier("arrive", d, full=True)

  def take(self, d: int, interpret: bool):
    """Reader: wait for the tiles; direction 0 gives values (free at once),
    direction 1 the shared-memory refs (``release`` once read)."""
    self._barrier("wait", d, full=True)
    if d == 0:
      values = [plgpu.load(ref, layout=WGMMA) for ref in self.bufs[d]]
      self.release(d)
      return values
    return [ref[...] for ref in self.bufs[d]] if interpret else self.bufs[d]

  def release(self, d: int):
    self._barrier("arrive", d, full=False)

  def drain(self, d: int):
    """Writer, after its last step: take the reader's last release, so no
    barrier is left mid-phase when the CTA exits."""
    pl.when(self.steps > 0)(lambda: self._barrier("wait", d, full=False))


class _DsTiles:
  """The fused kernel's (``cfg.one_kernel``) dS^T in shared memory, [2, C * bk,
  bq] (consumer w's rows w * bk .., two buffers by step parity), the A
  operand of the dQ GEMM (dQ = dS K over all C * bk keys of the CTA).

  The dQ share of step i is issued at step i + 1, behind that step's dV and
  dK GEMMs (a one-step lag), so a consumer waits only for the other
  consumers' previous step, never for their current one: no meeting per
  step keeps the consumers' softmax phases together, and one can run up to
  a step ahead.  Named barriers (ids after ``pipeline.Sync``'s consumer
  turns and Q / dO slot releases; its V-slot ids are unused by this
  kernel), per owner o and parity p, each of C warpgroups' threads:
  full(o, p): o stored its rows of buffer p (``bar.arrive`` by o,
  ``bar.sync`` by every other consumer); free(o, p): every other
  consumer's dQ GEMM that read them is done (the reverse).  Interpret mode:
  one mbarrier each, same protocol.
  """

  def __init__(self, ref, cfg: MosaicBackwardConfig, w: int, mbarriers):
    self.ref, self.w, self.c = ref, w, cfg.consumers
    self.first_id = BAR_TURN + cfg.consumers + cfg.num_stages
    assert self.first_id + 4 * self.c <= 16, cfg  # (config: num_stages=2)
    self.others = [o for o in range(self.c) if o != w]
    self.mbarriers = mbarriers

  def _bar(self, op: str, owner: int, parity, free: bool):
    i = 2 * (2 * owner + free) + parity
    if self.mbarriers is None:
      named_barrier(op, self.first_id + i, self.c * WG_THREADS)
    elif op == "arrive":
      plgpu.barrier_arrive(self.mbarriers.at[i])
    else:
      plgpu.barrier_wait(self.mbarriers.at[i])

  def put(self, i, parity, ds_t):
    """Store this consumer's dS^T rows of step i (once the others' dQ GEMMs
    of step i - 2 have read the buffer) and tell the others."""
    pl.when(i >= 2)(lambda: self._bar("sync", self.w, parity, True))
    self.ref.at[parity, pl.ds(self.w * ds_t.shape[0], ds_t.shape[0])][
        ...] = ds_t
    plgpu.commit_smem()  # read by wgmma (the async proxy)
    self._bar("arrive", self.w, parity, False)

  def operands(self, parity, bk: int, rows, cols, k_smems, k_base,
               stored=True):
    """(A, B) of dQ[rows, cols] = dS K[:, cols] over the CTA's keys (the K
    tiles k_smems[k_base + o] of consumers o), once the others' rows of
    buffer ``parity`` are stored (where ``stored``: step 0 has no previous
    step to wait for)."""
    for o in self.others:
      pl.when(stored)(lambda o=o: self._bar("sync", o, parity, False))
    return [(self.ref.at[parity, pl.ds(o * bk, bk), rows].transpose((1, 0)),
             k_smems.at[k_base + o, :, cols]) for o in range(self.c)]

  def release(self, parity):
    """This consumer's dQ GEMM has read the others' rows of buffer parity."""
    for o in self.others:
      self._bar("arrive", o, parity, True)

  def drain(self, total):
    """After the last of ``total`` steps (whose dQ share was issued without
    a release): take the others' last release of this consumer's rows, so
    no barrier is left mid-phase when the CTA exits."""
    pl.when(total >= 2)(
        lambda: self._bar("sync", self.w, lax.rem(total - 2, 2), True))


# Fixed-point dQ of the deterministic fused kernel: a row's partial sums
# times a power of two F stay below 2^_FIXED_BITS, and each partial is
# added as one int32 word (integer adds: the same bits in any order; the
# truncation of n partials moves a sum by less than n units, far below
# 2^31 - 2^30).  One word, not two: the two-word form moved twice the
# bytes through the TMA reduce-adds and ran 8-21% slower (runs 30-31).
_FIXED_BITS = 30


def fixed_point_scale(d_out, delta, k, v, group: int):
  """[B, N, T] f32 powers of two F: F times any partial sum over keys of a
  row of dQ = dS K (Alg. 2 line 15, before the softmax scale) is below
  2^30.  Bound: |sum_{j in J} dS_ij K_j| <= max|K| sum_j |dS_ij|, and
  sum_j |dS_ij| = sum_j P_ij |dP_ij - delta_i| (a soft-cap's factor is
  <= 1) <= ||dO_i|| max_j ||V_j|| + |delta_i| since P_i is a distribution;
  2x slack for dS's bf16 rounding.  K, V: [B, S, K, H]; d_out [B, T, N, H];
  delta [B, N, T].  30 bits: a partial is exact to 2^-31 of the bound.
  With dropout the kernel sums dS / r = P (Z dP - delta') (module
  docstring): |Z dP_ij - delta'_i| has the same bound with the delta'
  passed here."""
  f32 = jnp.float32
  # max |K| over H first (a row reduction), then over S: XLA merges the two
  # into one reduce over (S, H) and splits it S first, which read K at 1.9
  # TB/s (H200, d64 S4k: 28.5 -> 18.0 us; the barrier keeps them apart).
  k_rows = lax.optimization_barrier(jnp.max(jnp.abs(k.astype(f32)), -1))
  k_max = jnp.max(k_rows, axis=1)  # [B, K]
  v_max = jnp.sqrt(jnp.max(jnp.sum(jnp.square(v.astype(f32)), -1), 1))
  rep = lambda x: jnp.repeat(x, group, axis=1)[:, :, None]  # [B, N, 1]
  do_norm = jnp.sqrt(jnp.sum(jnp.square(d_out.astype(f32)), -1))  # [B, T, N]
  bound = (do_norm.transpose(0, 2, 1) * rep(v_max) + jnp.abs(delta)) * rep(
      k_max) * 2.0
  exp = _FIXED_BITS - jnp.ceil(jnp.log2(jnp.maximum(bound, 1e-30)))
  return jnp.exp2(jnp.clip(exp, -120.0, 100.0))


def to_fixed(part, scale):
  """The int32 word trunc(part * scale); ``scale`` broadcast to part's
  shape, a power of two, |part * scale| < 2^30.  One cvt per element:
  1-5% faster than two magic-number roundings without cvt (run 32, d64);
  the conversion costs the fused kernel 6-8% at d64 against adding the
  f32 bits unconverted (the consumers are issue-bound there)."""
  return (part * scale).astype(jnp.int32)


def from_fixed(word, scale):
  """Sums of ``to_fixed`` words -> f32 values."""
  return word.astype(jnp.float32) / scale


def _dq_share(cfg: MosaicBackwardConfig, head_dim: int, w: int):
  """((rows, cols) slices, shape) of the [block_q_dkv, H] dQ share of a
  fused (``cfg.one_kernel``) step that consumer w computes: a row block
  where the query step has 64 rows per consumer, else a column block (64
  columns at least: one swizzled tile of K)."""
  bq, c = cfg.block_q_dkv, cfg.consumers
  if bq >= 64 * c:
    shape = (bq // c, head_dim)
    return (pl.ds(w * shape[0], shape[0]), pl.ds(0, head_dim)), shape
  shape = (bq, head_dim // c)
  return (pl.ds(0, bq), pl.ds(w * shape[1], shape[1])), shape


class _DqShare:
  """Consumer w's share of a fused (``cfg.one_kernel``) step's dQ = dS K
  (Alg. 2 line 15, FA3's one-kernel backward): the [rows, cols] block of
  ``_dq_share`` ([block_q_dkv, H / C] at d128), summed over the CTA's
  C * block_kv keys and added one step late to dQ in HBM by TMA reduce-add
  (f32, or with ``f_ref`` fixed-point int32 words, ``to_fixed``).  A step's
  ``prev`` is the (query tile, query head) of the step the share is of."""

  def __init__(self, cfg: MosaicBackwardConfig, w: int, head_dim: int, smem,
               f_ref, dq_ref, b, kt, interpret: bool):
    self.smem, self.f_ref, self.dq_ref = smem, f_ref, dq_ref
    self.b, self.kt, self.interpret = b, kt, interpret
    self.bq = cfg.block_q_dkv
    (self.rows, self.cols), self.shape = _dq_share(cfg, head_dim, w)
    self.zeros = plgpu.layout_cast(jnp.zeros(self.shape, jnp.float32), WGMMA)

  def _rows_of(self, prev):
    tile, _ = prev
    return pl.ds(tile * self.bq + self.rows.start, self.shape[0])

  def fixed_scale(self, prev):
    """The rows' F (fixed point), loaded at the step's start, ahead of its
    use (run 28: no faster than loading it in the add); None for f32."""
    if self.f_ref is None:
      return None
    return plgpu.load(self.f_ref.at[self.b, prev[1], self._rows_of(prev)],
                      layout=ROW, optimized=False)

  def add(self, part, prev, f):
    """TMA reduce-add of a dQ share into dQ in HBM (f32, or fixed-point words
    with the rows' scale f) at the query tile and head ``prev`` of its
    step."""
    head, rows, b = prev[1], self._rows_of(prev), self.b
    if self.f_ref is not None:
      part = to_fixed(part, lax.broadcast_in_dim(f, self.shape, [0]))
    plgpu.wait_smem_to_gmem(0, wait_read_only=True)  # the last adds read
    self.smem[...] = part
    plgpu.commit_smem()
    if self.interpret:  # its own slot of a [kv tiles, ...] array (no TMA
      # reduce-add there); every step of a CTA writes other rows
      plgpu.copy_smem_to_gmem(
          self.smem, self.dq_ref.at[self.kt, b, rows, head, self.cols])
    else:
      plgpu.copy_smem_to_gmem(self.smem,
                              self.dq_ref.at[b, rows, head, self.cols],
                              reduction_op="add")


def _store_rows(acc, smem, dst, dtype):
  """acc -> shared memory (a tile no wgmma reads any more) -> HBM by TMA."""
  smem[...] = acc.astype(dtype)
  plgpu.commit_smem()
  plgpu.copy_smem_to_gmem(smem, dst)


def _launch(kernel, name, operands, out_type, order, consumers: int,
            smem, barriers, interpret: bool, num_ctas: int = 0):
  """A grid of ``order`` ((axis name, size), the last axis fastest), or
  with ``num_ctas`` one "cta" axis of that many (persistent)."""
  def body(*refs):
    pl.run_scoped(functools.partial(kernel, *refs), smem, barriers,
                  collective_axes="wg")

  body.__name__ = name
  if num_ctas:
    order = (("cta", num_ctas),)
  return plgpu.kernel(
      body,
      out_type=out_type,
      grid=tuple(size for _, size in order),
      grid_names=tuple(axis for axis, _ in order),
      num_threads=consumers + 1,
      thread_name="wg",
      compiler_params=plgpu.CompilerParams(
          approx_math=True, unsafe_no_auto_barriers=True,
          reduction_scratch_bytes=0),
      interpret=plgpu.InterpretGPUParams() if interpret else None,
  )(*operands)


# A consumer warpgroup's registers per thread -> the producer's: the
# forward's splits, and FA3's 240 / 24 for two consumers (both fill the
# entry's 384 threads x 168, setmaxnreg).
_PRODUCER_REGISTERS = {**dict(REGISTERS.values()), 240: 24}


def _by_role(wg, cfg: MosaicBackwardConfig, producer, consumer,
             registers: int | None = None):
  """The warpgroup roles as the two branches of one if/else, the form ptxas
  documents for ``setmaxnreg`` (the consumers' code is register-allocated
  for 232 registers, the producer's for 40, or with ``registers=240`` 240
  and 24 (the kernel's ``dkdv_registers`` / ``dq_registers``); ptxas's
  report shows the entry's 65536 / 384 = 168).  ``consumer(w)`` gets the
  traced warpgroup index, or with ``split_head_dim`` or the fused kernel
  (which slice column blocks by w) a static one (one branch each)."""
  c = cfg.consumers
  if registers is None and cfg.one_kernel:
    # Fused: dK, dV and the dQ share (160 of a consumer's registers at
    # d128) spill at 232 (428 bytes, run 18), not at 240 with a
    # 24-register producer (run 20; FA3's split).
    registers = 240
  regs = REGISTERS[c] if registers is None else (
      registers, _PRODUCER_REGISTERS[registers])

  def consumers():
    plgpu.set_max_registers(regs[0], action="increase")
    if not cfg.one_kernel and not cfg.split_head_dim:
      return consumer(wg)

    def branch(w):
      if w == c - 1:
        return consumer(w)
      lax.cond(wg == w, lambda: consumer(w), lambda: branch(w + 1))
    branch(0)

  def producers():
    plgpu.set_max_registers(regs[1], action="decrease")
    producer()

  # (producers first: Pallas lowers a cond's branches[0], its false branch,
  # a second time for its result types; as consumers it doubled the
  # kernel's jaxpr -> Mosaic GPU lowering of the consumer side)
  lax.cond(wg != c, consumers, producers)


def _interpret_barriers(cfg: MosaicBackwardConfig):
  """Stand-ins for the named barriers of ``pipeline.Sync`` (and, with
  split_head_dim, of ``_Exchange``; in the fused kernel, of ``_DsTiles``)."""
  c, stages = cfg.consumers, cfg.num_stages
  pair_bars = ()
  if cfg.split_head_dim or cfg.one_kernel:
    pair_bars = (plgpu.Barrier(num_arrivals=c),  # consumers_meet
                 plgpu.Barrier(num_barriers=4 if cfg.split_head_dim
                               else 4 * c))  # _Exchange / _DsTiles
  return (plgpu.Barrier(num_arrivals=c, num_barriers=stages),
          plgpu.Barrier(num_arrivals=c, num_barriers=stages),
          plgpu.Barrier(num_barriers=c), *pair_bars)


# --------------------------------------------------------------------------
# dK / dV
# --------------------------------------------------------------------------


def _ahead_slot(cfg: MosaicBackwardConfig, r):
  """row_ring with prefetch_rows: an item's row copy r (its step r's lse2 /
  delta; r = 0 .. its steps, the last a copy of rows in range, read and not
  used) sits in this slot of the row ring, read a step ahead, under the
  previous step's dV / dK GEMMs."""
  return lax.rem(r, cfg.row_ring_shape[0])


class _StepRows:
  """A dK/dV consumer's row loads: lse2 and delta ([block_q_dkv] f32 each,
  Alg. 2 line 9's L_i and D_i, for line 11's P and line 14's dS) of a step's
  query tile, from global memory, or with ``ring`` (row_ring: (lse_ref,
  delta_ref, row_smem, row_bars)) from the producer's TMA row ring."""

  def __init__(self, cfg: MosaicBackwardConfig, refs, ring, b, kvh,
               group: int, item):
    self.cfg, self.refs, self.ring, self.item = cfg, refs, ring, item
    self.b, self.kvh, self.group = b, kvh, group
    self.n_q_tiles = refs[0].shape[-1] // cfg.block_q_dkv

  def load(self, n, tile):
    """(lse2, delta) of query tile ``tile`` of query head n, from HBM."""
    bq = self.cfg.block_q_dkv
    rows = pl.ds(tile * bq, bq)
    return tuple(plgpu.load(ref.at[self.b, n, rows], layout=COL,
                            optimized=False) for ref in self.refs)

  def _ring(self, slot):
    _, _, row_smem, row_bars = self.ring
    plgpu.barrier_wait(row_bars.at[slot])
    return tuple(plgpu.load(row_smem.at[slot, a], layout=COL,
                            optimized=False) for a in range(2))

  def of_step(self, slot, n, qt):
    """A step's rows at its start: copied by the producer with Q / dO into
    ring slot ``slot`` (row_ring), else loaded (query tile qt, head n)."""
    if self.ring is not None:
      return self._ring(slot)
    return self.load(n, qt)

  def ahead(self, g, j):
    """The rows of step j of head g (``prefetch_rows``), of a tile in range
    even where j is past the item's last step."""
    if self.ring is not None:  # (ring_ahead) the item's (g, j) is its row
      # copy g * n_steps + j
      return self._ring(_ahead_slot(self.cfg, g * self.item.n_steps + j))
    tile = jnp.clip(self.item.tile_of(j), 0, self.n_q_tiles - 1)
    return self.load(self.kvh * self.group + g, tile)


def _dkdv_producer(items: schedule.Items, work_item, sync,
                   cfg: MosaicBackwardConfig, group: int, tiles, row_ring,
                   keys, bias=None):
  """The dK/dV kernel's producer warpgroup: for every step of the CTA's
  items (each of the G query heads of the kv head, then the query tiles),
  TMA copies of the step's Q and dO tiles ([block_q_dkv, H] each, Alg. 2
  line 9's loads of Q_i and dO_i) into the ring slot the consumers
  released; with ``row_ring`` (lse_ref, delta_ref, row_smem, row_bars) the
  step's lse2 / delta rows beside them (with prefetch_rows, one step
  ahead); with ``keys`` (drop, key_smem, key_bars) the query rows' dropout
  keys; with ``bias`` (a key-major ``BiasRing``) the bias of the step's
  query rows against the CTA's keys.  ``tiles``: ((q_ref, do_ref),
  (q_smems, do_smems), (q_bars, do_bars))."""
  (q_ref, do_ref), (q_smems, do_smems), (q_bars, do_bars) = tiles
  stages, bq = cfg.num_stages, cfg.block_q_dkv
  ring_ahead = row_ring is not None and cfg.prefetch_rows
  if row_ring is not None:
    lse_ref, delta_ref, row_smem, row_bars = row_ring
    n_q_tiles = lse_ref.shape[-1] // bq

  def item_loads(idx, g0):
    b, kvh, kt, item = work_item(idx, lengths=False)
    n_steps = item.n_steps

    def copy_rows_ahead(r):
      """ring_ahead: the item's row copy r (its step r's lse2 / delta; r =
      its step count: the last head's first tile, read and not used)."""
      g = jnp.minimum(lax.div(r, jnp.maximum(n_steps, 1)), group - 1)
      tile = jnp.clip(item.tile_of(r - g * n_steps), 0, n_q_tiles - 1)
      copy_row_pair((lse_ref, delta_ref), b, kvh * group + g,
                    pl.ds(tile * bq, bq), row_smem, row_bars,
                    _ahead_slot(cfg, r))

    if ring_ahead:  # copy 0
      copy_rows_ahead(jnp.int32(0))

    @pl.loop(0, group * n_steps)
    def _(i):
      g = lax.div(i, n_steps)
      slot = lax.rem(g0 + i, stages)
      rows = (b, pl.ds(item.tile_of(i - g * n_steps) * bq, bq),
              kvh * group + g)
      pl.when(g0 + i >= stages)(lambda: sync.await_release(0, slot))
      plgpu.copy_gmem_to_smem(q_ref.at[rows], q_smems.at[slot],
                              q_bars.at[slot])
      plgpu.copy_gmem_to_smem(do_ref.at[rows], do_smems.at[slot],
                              do_bars.at[slot])
      if ring_ahead:  # step i + 1's rows (its slot: read during step
        # i - stages - 1, released before this step's load)
        copy_rows_ahead(i + 1)
      elif row_ring is not None:  # the rows' (lse2, delta)
        copy_row_pair((lse_ref, delta_ref), b, rows[2], rows[1], row_smem,
                      row_bars, slot)
      if keys is not None:  # the query rows' dropout keys (r_i, m_i)
        drop, key_smem, key_bars = keys
        drop.copy_rows(b, rows[2], rows[1], key_smem, key_bars, slot)
      if bias is not None:  # [block_q_dkv, block_kv_dkv] per consumer
        bias.copy_parts(b, rows[2], rows[1],
                        kt * (cfg.row_tiles * cfg.block_kv_dkv), slot)
    return g0 + group * n_steps

  total = items.run(item_loads)

  # Drain: no barrier is left mid-phase when the CTA exits.
  @pl.loop(jnp.maximum(0, total - stages), total)
  def _(i):
    sync.await_release(0, lax.rem(i, stages))


def _dkdv_kernel(q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, tiles_ref,
                 *refs, spec: masks.MaskSpec, scale: float,
                 cap: float | None, cfg: MosaicBackwardConfig, group: int,
                 interpret: bool, alibi: bool, rate: float, bias: bool,
                 order: tuple[tuple[str, int], ...], persistent: bool):
  """A work item: ``C * block_kv`` key rows of kv head ``heads``; loops over
  the G query heads of the kv head, then the query tiles of the tile table.
  One item per CTA (a grid of ``order``), or with ``persistent`` the items
  of the CTA's row of the schedule operand (``schedule.Items``): the Q / dO
  ring runs on across items, so the producer loads the next item's first
  tiles while the consumers store this one's dK / dV.

  ``cfg.one_kernel`` (FA3's backward, Sec. 3.1 of Shah et al.): one
  kernel, five GEMMs per step instead of the two kernels' seven.  Each
  consumer stores its dS^T [block_kv, block_q] into the CTA's
  [C * block_kv, block_q] tile in shared memory (``_DsTiles``); one step
  later consumer w computes its block of that step's dQ share over all
  C * block_kv keys (``_dq_share``: columns w * H / C .. at d128,
  [block_q, H / C], 32 registers; rows with 128-row query steps) and adds
  it to dQ in HBM with TMA reduce-add.  The adds of different CTAs land in
  any order: as f32 (``deterministic=False``) dQ's bits can change run to
  run; as fixed-point int32 words (``to_fixed``) they cannot.

  ``bias`` (two kernels only): then the bias operand, read through the
  Q / dO ring (``BiasRing``, key-major: consumer w's [block_q_dkv,
  block_kv_dkv] tile of each step, loaded transposed into S^T's
  layout)."""
  sched_ref = None
  if persistent:
    sched_ref, *refs = refs
  q_seg_ref, kv_seg_ref, mask_ref, refs = mask_refs(spec, refs)
  slopes_ref = refs.pop(0) if alibi else None
  drop = DropoutTiles.pop(refs, rate,
                          (cfg.block_kv_dkv, cfg.block_q_dkv), 1)
  bias_ref = refs.pop(0) if bias else None
  fold = alibi and folds_alibi(scale, cap)
  fused = cfg.one_kernel  # dQ by TMA reduce-add into dq_ref
  fixed = fused and cfg.deterministic  # (fixed point: F [B, N, T])
  f_ref = refs.pop(0) if fixed else None
  dq_ref = refs.pop(0) if fused else None  # f32, or int32 words
  dk_ref, dv_ref, smem, barriers = refs
  k_smems, v_smems, q_smems, do_smems, *extra_smem = smem
  k_bars, v_bars, q_bars, do_bars, *interpret_bars = barriers
  ring = None  # the bias ring [stages, C, block_q, block_kv]: the last
  if bias_ref is not None:
    ring = BiasRing(bias_ref, extra_smem.pop(), interpret_bars.pop())
  # row_ring: each step's lse2 / delta rows come through the Q / dO ring
  # (TMA, [stages, 2, block_q] f32, their own barriers); dropout: likewise
  # the row keys of each step's query tile (int32)
  row_ring = None
  if cfg.row_ring:  # (lse_ref, delta_ref, its smem, its barriers)
    row_ring = (lse_ref, delta_ref, extra_smem.pop(), interpret_bars.pop())
  key_smem = extra_smem.pop() if rate > 0.0 else None
  key_bars = interpret_bars.pop() if rate > 0.0 else None
  dtype, head_dim = q_ref.dtype, q_ref.shape[-1]
  c, stages = cfg.consumers, cfg.num_stages
  bq, bk = cfg.block_q_dkv, cfg.block_kv_dkv
  wg = lax.axis_index("wg")
  sync = Sync(wg, c, stages, interpret_bars if interpret else None)
  items = schedule.Items(order, sched_ref)
  kv_sets = k_smems.shape[0] // c if not cfg.split_head_dim else 1

  def item_coords(i):
    """(batch row, kv head, kv tile) of the CTA's item i."""
    coords = items.coords(i)
    return tuple(coords[a] for a in ("batch", "heads", "kv_tiles"))

  def work_item(i, lengths: bool):
    """``item_coords`` of the CTA's item i and its ``Item``."""
    b, kvh, kt = item_coords(i)
    return b, kvh, kt, Item(b, kvh, kt, tiles_ref, cfg.masked_first,
                            lengths=lengths)

  def _consumer(w):
    stagger = _Stagger(sync, cfg, w)
    items.run(functools.partial(_consumer_item, w, stagger))
    plgpu.wait_smem_to_gmem(0, wait_read_only=True)  # smem free: exit

  def row_tile(w, coords, buf):
    """Consumer w's K / V tiles of the item at ``coords`` in set ``buf``."""
    b, kvh, kt = coords
    return _RowTile(cfg, w, (k_smems, v_smems), (k_bars, v_bars), kt, bk,
                    lambda rows: (b, rows, kvh), buf)

  def _consumer_item(w, stagger, idx, g0):
    """The CTA's item idx; its step i is step g0 + i of the CTA's Q / dO
    ring.  Every barrier of the item's own (``_DsTiles``, ``_Exchange``) is
    back where it started when it returns.  With two K / V sets, item idx
    uses set idx % 2, loaded during item idx - 1."""
    b, kvh, kt, item = work_item(idx, lengths=True)
    n_steps = item.n_steps  # query tiles per query head
    buf = lax.rem(idx, kv_sets) if kv_sets > 1 else 0
    k_base = buf * c  # the set's first K tile
    kv = row_tile(w, (b, kvh, kt), buf)
    kv_base = kv.first
    if kv_sets == 1:
      kv.load(k_ref, v_ref)
    else:
      pl.when(idx == 0)(lambda: kv.load(k_ref, v_ref))
    if spec.has_segments:
      kv_seg = segment_ids(kv_seg_ref, b, pl.ds(kv_base, bk), (bk, bq), 0)
    if drop is not None:  # the keys of the CTA's rows: its columns' keys
      drop_cols = drop.cols(pl.ds(kv_base, bk))
    zeros = plgpu.layout_cast(jnp.zeros((bk, kv.width), jnp.float32), WGMMA)
    prefetch = cfg.prefetch_rows  # (two kernels: not fused, not split)
    rows_init = (plgpu.layout_cast(jnp.zeros((bq,), jnp.float32), COL),) * 2 \
        if prefetch else ()
    xchg = None
    if cfg.split_head_dim:
      xchg = _Exchange(extra_smem[0], cfg,
                       interpret_bars[4] if interpret else None,
                       group * n_steps)
    if fused:  # dS^T of the CTA [2, C * bk, bq]; dQ pieces [C, rows, cols]
      ds_tiles = _DsTiles(extra_smem[0], cfg, w,
                          interpret_bars[4] if interpret else None)
      dq = _DqShare(cfg, w, head_dim, extra_smem[1].at[w], f_ref, dq_ref,
                    b, kt, interpret)
    kv.wait()
    if kv_sets > 1:  # -- the next item's K and V, into the other set
      @pl.when(idx + 1 < items.count)
      def _():
        # the other set's last dK / dV stores (item idx - 1) have read it
        plgpu.wait_smem_to_gmem(0, wait_read_only=True)
        row_tile(w, item_coords(idx + 1), 1 - buf).load(k_ref, v_ref)

    step_rows = _StepRows(cfg, (lse_ref, delta_ref), row_ring, b, kvh,
                          group, item)

    def score_terms(n, qt, q_rows, lse2, delta, *, masked: bool, side,
                    has_s: bool, bias=None):
      """A step's score terms (query tile qt, rows q_rows, of head n): the
      inits of the S^T GEMM (Alg. 2 line 10; -lse2, with ALiBi's folded
      linear part, and the bias where folded: ``_bias_terms``) and of the
      dP^T GEMM (-delta: dP^T - delta, line 14), and P^T as a function of
      S^T (``_probs``: logits, ALiBi, the bias, the step's mask)."""
      s_fold = fold and has_s
      if alibi and has_s:  # folded: its linear part is in S^T's init
        ab = AlibiTile(slopes_ref[b, n], item.offset, qt * bq, kv_base,
                       (bk, bq), 1, spec.is_causal, side=side,
                       fixed_axis=0 if cfg.alibi_fixed_keys else 1,
                       # (Mosaic GPU's layout inference: not at 64)
                       fma_queries=(cfg.alibi_fma_queries
                                    and not interpret and bq >= 128))
      s_init, dp_init, logits = _row_terms(
          lse2 - ab.q_vec if s_fold else lse2, delta, (bk, bq), 1, scale, cap)
      k_init = ab.k_init(scale * _LOG2E) if s_fold else None
      if k_init is not None:
        s_init = s_init + k_init
      s_init, bias_logits = _bias_terms(s_init, bias, scale, cap)

      def visible():  # the step's visible [bk, bq] (masked tiles)
        segs = dense = None
        if spec.has_segments:
          segs = lambda: (segment_ids(q_seg_ref, b, q_rows, (bk, bq), 1),
                          kv_seg)
        if mask_ref is not None:  # a key-major copy of the dense mask
          dense = lambda: dense_tile(mask_ref, b, n, pl.ds(kv_base, bk),
                                     q_rows)
        return tile_visible(spec, item, kv_base, qt * bq, (bk, bq), True,
                            segs, dense)

      probs = functools.partial(  # S^T -> (P^T, the soft-cap's tanh?)
          _probs, logits=logits, visible=visible if masked else None,
          alibi=(ab.add_rest if fold else ab.full) if alibi and has_s
          else None, fold=fold, bias=bias_logits)
      return s_init, dp_init, probs

    def dp_partner(dk, dv, slot, q_smem, do_smem, dp_init, first):
      """split_head_dim's consumer 1 in a step: dP^T - delta to consumer 0,
      P^T and dS^T back from it, then its columns of dV += P^T dO and
      dK += dS^T Q (Alg. 2 lines 12, 16)."""
      (dp,) = _scores(((kv.products(1, do_smem), dp_init),), interpret)
      xchg.put(0, first, dp)
      p, ds = xchg.take(1, interpret)
      dv, dk = _accumulate((dv, dk), (lambda: [(p, kv.narrow(do_smem))],
                                      lambda: [(ds, kv.narrow(q_smem))]),
                           interpret)
      xchg.release(1)
      sync.release(0, slot)
      return dk, dv

    def step(j, carry, *, g, masked: bool, side=None):
      dk, dv, *prev = carry  # fused: (query tile, head) of step i - 1
      i = g * n_steps + j  # the item's step
      slot = lax.rem(g0 + i, stages)  # (the ring's step g0 + i)
      n = kvh * group + g
      qt = item.tile_of(j)
      q_rows = pl.ds(qt * bq, bq)
      if prefetch:  # loaded under the previous step's dV / dK GEMMs (run
        # 170: +1-5% at d128; loaded here, they sat ahead of the score GEMMs)
        lse2, delta, *prev = prev
      else:
        lse2, delta = step_rows.of_step(slot, n, qt)
      if fused:  # (step 0: an unused load of step -1's "rows", tile 0)
        f_prev = dq.fixed_scale(prev)
      q_smem, do_smem = q_smems.at[slot], do_smems.at[slot]
      plgpu.barrier_wait(q_bars.at[slot])
      plgpu.barrier_wait(do_bars.at[slot])
      stagger.wait(g0 + i)
      # -- S^T = K Q^T and dP^T - delta = V dO^T - delta  [bk, bq]
      s_init, dp_init, probs = score_terms(
          n, qt, q_rows, lse2, delta, masked=masked, side=side,
          has_s=xchg is None or w == 0,  # (else consumer 1: no S^T here)
          bias=None if ring is None else  # (not split_head_dim)
          lambda: ring.load_transposed(slot, w))  # [bk, bq]
      first = None if xchg is None else i == 0

      kept_ds = drop is not None and xchg is None  # (module docstring)
      if xchg is None:  # P^T computed while the dP^T wgmma runs
        p_th, dp = _scores(((kv.products(0, q_smem), s_init),
                            (kv.products(1, do_smem),
                             plgpu.layout_cast(jnp.zeros((bk, bq), jnp.float32),
                                               WGMMA) if kept_ds else dp_init)),
                           interpret,
                           on_first=probs, n_first=1 if cap is None else 2)
        stagger.go(g0 + i)
      elif w == 0:  # S^T here, dP^T - delta from consumer 1
        (s,) = _scores(((kv.products(0, q_smem), s_init),), interpret)
        p_th = probs(s)
      else:  # dP^T - delta to consumer 0; P^T and dS^T back from it
        return dp_partner(dk, dv, slot, q_smem, do_smem, dp_init, first)
      p, th = (*p_th, None)[:2]
      parity = lax.rem(i, 2)
      if drop is not None:  # Z P^T for dV; Z dP^T - delta' for dS^T
        drop_rows = drop.ring_rows(key_smem, key_bars, slot)
        # (split_head_dim: Z dP^T - delta' comes below)
        (p_pv,) = drop.select([(p, None)], drop_rows, drop_cols, interpret)
      else:
        p_pv = p

      def ds_t():  # computed while the dV wgmma runs
        if kept_ds:  # (Z P^T) dP^T - P^T delta'
          ds = _ds(p_pv, dp, th, p * dp_init)
        else:
          ds = _ds(p, dp, th)
        ds = ds.astype(dtype)
        if fused:  # this consumer's rows of the dQ GEMM's A operand dS^T
          # (dK's A operand stays ds in registers: from shared memory it
          # spilled more, run 19)
          ds_tiles.put(i, parity, ds)
        return [(ds, kv.narrow(q_smem))]

      def dq_share():  # step i - 1's, issued behind dV and dK (step 0: a
        # product of an unwritten buffer, never added)
        return ds_tiles.operands(1 - parity, bk, dq.rows, dq.cols, k_smems,
                                 k_base, stored=i >= 1)

      products = (lambda: [(p_pv.astype(dtype), kv.narrow(do_smem))], ds_t)
      hand_over = None
      if xchg is not None:  # dV's GEMM (P^T from registers) runs while dS^T
        # is computed; both go to consumer 1 once dK's GEMM is issued too
        # (runs 165, 167: +4-6%, then +6-13% at d256 S4k)
        p_pv = p_pv.astype(dtype)
        split = []

        def split_ds():
          (dp,) = xchg.take(0, interpret)
          if drop is not None:
            (dp,) = drop.select([(dp, dp_init)], drop_rows, drop_cols,
                                interpret)
          split.append(_ds(p, dp, th).astype(dtype))
          return [(split[0], kv.narrow(q_smem))]
        products = (lambda: [(p_pv, kv.narrow(do_smem))], split_ds)
        hand_over = lambda: xchg.put(1, first, p_pv, split[0])
      # -- dV += P^T dO, dK += dS^T Q  [bk, H] (split_head_dim: [bk, H / C]);
      # fused: dQ[q rows, cols] = dS K[:, cols] too (its share
      # of the CTA's dQ, summed over the CTA's C * bk keys)
      if not fused:
        def then():  # the hand-over, or the next step's rows (the step
          # after the head's last is the next head's first)
          if hand_over is not None:
            hand_over()
          if not prefetch:
            return ()
          if row_ring is not None:  # the ring's next copy (past the
            # item's last step: a copy of rows in range, read and not used)
            return step_rows.ahead(g, j + 1)
          last = j + 1 >= n_steps
          return step_rows.ahead(
              jnp.minimum(g + last.astype(jnp.int32), group - 1),
              jnp.where(last, 0, j + 1))
        dv, dk, *nxt = _accumulate((dv, dk), products, interpret, then=then,
                                   then_init=rows_init)
        sync.release(0, slot)  # the Q and dO slot may be refilled
        return dk, dv, *nxt
      dv, dk, part = _accumulate((dv, dk, dq.zeros), (*products, dq_share),
                                 interpret)
      sync.release(0, slot)

      @pl.when(i >= 1)  # -- add step i - 1's share to dQ in HBM
      def _():
        ds_tiles.release(1 - parity)
        dq.add(part, prev, f_prev)
      return dk, dv, qt, n

    # Non-causal folded ALiBi: query tiles right of, across and left of
    # the diagonal in three loops (``alibi_split``)
    alibi_tiles = (alibi_split(kv_base, kv_base + bk - 1, item.offset,
                               bq, False)
                   if fold and not spec.is_causal else None)

    def head(g, carry):
      return run_steps(item, functools.partial(step, g=g), carry,
                       alibi_tiles)

    carry = (zeros, zeros, *(step_rows.ahead(0, 0) if prefetch else ()),
             *((jnp.int32(0),) * 2 if fused else ()))
    if group == 1:
      dk, dv, *last = head(0, carry)
    else:
      dk, dv, *last = lax.fori_loop(0, group, head, carry)
    if fused:  # -- the last step's dQ share
      total = group * n_steps

      @pl.when(total > 0)
      def _():
        parity = lax.rem(total - 1, 2)
        (part,) = _accumulate((dq.zeros,), (lambda: ds_tiles.operands(
            parity, bk, dq.rows, dq.cols, k_smems, k_base),), interpret)
        dq.add(part, last, dq.fixed_scale(last))
        ds_tiles.drain(total)
    # -- epilogue: K and V are no longer read (every wgmma was awaited;
    # split_head_dim: by any consumer)
    if xchg is not None:
      xchg.drain(1 - w)
    if xchg is not None or fused:  # the other consumer may still read K
      sync.consumers_meet()
    r = 1.0 / (1.0 - rate)  # dropout's scale (1 without)
    kv.store(0, dk * (scale * r), dk_ref, dtype)
    kv.store(1, dv * r if rate > 0.0 else dv, dv_ref, dtype)
    if persistent and kv_sets == 1:  # the next item's K and V land here
      plgpu.wait_smem_to_gmem(0, wait_read_only=True)
    return g0 + group * n_steps

  def _producer():
    _dkdv_producer(items, work_item, sync, cfg, group,
                   ((q_ref, do_ref), (q_smems, do_smems), (q_bars, do_bars)),
                   row_ring,
                   (drop, key_smem, key_bars) if drop is not None else None,
                   ring)

  _by_role(wg, cfg, _producer, _consumer, cfg.dkdv_registers)


# --------------------------------------------------------------------------
# dQ
# --------------------------------------------------------------------------


class _DbiasTiles:
  """dbias of a full (T, S) bias: dS of the logits (Alg. 2 line 14 before
  the soft-cap's factor; times r = 1 / (1 - rate) with dropout), the
  [B, N, T, S] partial ([B, N, Tp, Sp] where ``BiasRing.operand``
  pads the bias) in the bias dtype that ``_vjp`` sums over the bias's
  broadcast dims (the triton backward's contract).  Written by the
  dQ kernel, whose CTA owns its query rows of one head: every element by
  exactly one consumer, no atomics.  Consumer w stages each step's
  [block_q, block_kv] tile in its own shared-memory tile and stores it by
  TMA while its dQ GEMM runs; the tiles its CTA skips (``Item``: outside
  [first, last)) it stores as zeros first, from the same staging tile."""

  def __init__(self, ref, smem, b, n, q_rows, block_kv: int, rate: float):
    self.ref, self.smem, self.b, self.n = ref, smem, b, n
    self.q_rows, self.bk, self.rate = q_rows, block_kv, rate

  def _store(self, ki):
    plgpu.copy_smem_to_gmem(
        self.smem, self.ref.at[self.b, self.n, self.q_rows,
                               pl.ds(ki * self.bk, self.bk)])

  def zero_skipped(self, item: Item):
    """Zeros into the tiles of the rows that the item's steps skip."""
    self.smem[...] = plgpu.layout_cast(
        jnp.zeros(self.smem.shape, self.smem.dtype), WGMMA)
    plgpu.commit_smem()
    pl.loop(0, item.first)(self._store)
    pl.loop(item.last, pl.cdiv(self.ref.shape[-1], self.bk))(self._store)

  def put(self, ds_logits, ki):
    """A step's dS of the logits [block_q, block_kv] f32 -> kv tile ki."""
    if self.rate > 0.0:  # the dQ kernel's dS / r (module docstring)
      ds_logits = ds_logits * (1.0 / (1.0 - self.rate))
    plgpu.wait_smem_to_gmem(0, wait_read_only=True)  # the last store read
    self.smem[...] = ds_logits.astype(self.smem.dtype)
    plgpu.commit_smem()
    self._store(ki)


def _dq_kernel(q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, tiles_ref,
               *refs, spec: masks.MaskSpec, scale: float, cap: float | None,
               cfg: MosaicBackwardConfig, group: int, num_q_tiles: int,
               interpret: bool, alibi: bool, rate: float, bias: bool,
               dbias: bool = False):
  """One CTA: ``C * block_q`` query rows of head ``heads``; loops over the
  kv tiles of the tile table (causal: launched longest first).  ``bias``:
  then the bias operand, read through the K / V ring (``BiasRing``,
  query-major, copied with V: the forward's tiles); ``dbias``: then its
  gradient, a second output (``_DbiasTiles``)."""
  q_seg_ref, kv_seg_ref, mask_ref, refs = mask_refs(spec, refs)
  slopes_ref = refs.pop(0) if alibi else None
  drop = DropoutTiles.pop(refs, rate,
                          (cfg.block_q_dq, cfg.block_kv_dq), 0)
  bias_ref = refs.pop(0) if bias else None
  dq_ref, *dbias_ref, smem, barriers = refs
  q_smems, do_smems, k_smems, v_smems, *xchg_smem = smem
  q_bars, do_bars, k_bars, v_bars, *interpret_bars = barriers
  # the bias: its ring [stages, C * block_q, block_kv], then dbias's
  # staging tiles [C, block_q, block_kv] (the last smem)
  dbias_smem = xchg_smem.pop() if dbias else None
  ring = None
  if bias_ref is not None:
    ring = BiasRing(bias_ref, xchg_smem.pop(), interpret_bars.pop())
  # dropout: the column keys of each step's key tile come with K
  key_smem = xchg_smem.pop() if drop is not None else None
  key_bars = interpret_bars.pop() if drop is not None else None
  dtype = q_ref.dtype
  c, stages = cfg.consumers, cfg.num_stages
  bq, bk = cfg.block_q_dq, cfg.block_kv_dq
  wg = lax.axis_index("wg")
  b, n, qt = (lax.axis_index(a) for a in ("batch", "heads", "q_tiles"))
  if spec.is_causal:  # the last query tiles see the most keys
    qt = num_q_tiles - 1 - qt
  sync = Sync(wg, c, stages, interpret_bars if interpret else None)
  item = Item(b, n, qt, tiles_ref, cfg.masked_first, lengths=True)

  def _consumer(w):
    stagger = _Stagger(sync, cfg, w)
    qo = _RowTile(cfg, w, (q_smems, do_smems), (q_bars, do_bars), qt, bq,
                  lambda rows: (b, rows, n))
    q_base = qo.first
    qo.load(q_ref, do_ref)
    row_vec = lambda ref: plgpu.load(ref.at[b, n, pl.ds(q_base, bq)],
                                     layout=ROW, optimized=False)
    lse_rows, delta = row_vec(lse_ref), row_vec(delta_ref)
    s_init, dp_init, logits = _row_terms(lse_rows, delta, (bq, bk), 0, scale,
                                         cap)
    fold = alibi and folds_alibi(scale, cap)
    if alibi:
      slope2 = slopes_ref[b, n]
    if spec.has_segments:
      q_seg = segment_ids(q_seg_ref, b, pl.ds(q_base, bq), (bq, bk), 0)
    if drop is not None:  # the keys of the CTA's rows
      drop_rows = drop.rows(b, n, pl.ds(q_base, bq))
    dbias_tiles = None
    if dbias:  # (zeros into the skipped tiles: before the steps)
      dbias_tiles = _DbiasTiles(dbias_ref[0], dbias_smem.at[w], b, n,
                                pl.ds(q_base, bq), bk, rate)
      dbias_tiles.zero_skipped(item)
    dq = plgpu.layout_cast(jnp.zeros((bq, qo.width), jnp.float32), WGMMA)
    xchg = None
    if cfg.split_head_dim:
      xchg = _Exchange(xchg_smem[0], cfg,
                       interpret_bars[4] if interpret else None, item.n_steps)
    qo.wait(cfg.dq_rows_in_registers, interpret)

    def step(j, dq, *, masked: bool, side=None):
      slot = lax.rem(j, stages)
      ki = item.tile_of(j)
      k_smem, v_smem = k_smems.at[slot], v_smems.at[slot]
      s_init_j = s_init
      if alibi and (xchg is None or w == 0):  # folded: in S's init
        ab = AlibiTile(slope2, item.offset, q_base, ki * bk, (bq, bk), 0,
                       spec.is_causal, side=side)
        k_init = ab.k_init(scale * _LOG2E) if fold else None
        if k_init is not None:
          s_init_j = _row_terms(lse_rows - ab.q_vec, delta, (bq, bk), 0,
                                scale, cap)[0] + k_init
      plgpu.barrier_wait(k_bars.at[slot])
      plgpu.barrier_wait(v_bars.at[slot])
      stagger.wait(j)
      bias_logits = None
      if ring is not None:  # (not split_head_dim) this consumer's rows
        s_init_j, bias_logits = _bias_terms(
            s_init_j, lambda: ring.load(slot, w * bq, bq), scale, cap)

      visible = lambda: query_tile_visible(
          spec, item, b, n, q_base, ki, (bq, bk),
          q_seg if spec.has_segments else None, kv_seg_ref, mask_ref)
      probs = functools.partial(  # S -> (P, the soft-cap's tanh?)
          _probs, logits=logits, visible=visible if masked else None,
          alibi=(ab.add_rest if fold else ab.full)
          if alibi and (xchg is None or w == 0) else None, fold=fold,
          bias=bias_logits)

      # -- S = Q K^T and dP - delta = dO V^T - delta  [bq, bk]
      if xchg is None:  # P computed while the dP wgmma runs
        p_th, dp = _scores(((qo.products(0, k_smem), s_init_j),
                            (qo.products(1, v_smem), dp_init)), interpret,
                           on_first=probs, n_first=1 if cap is None else 2)
        stagger.go(j)
      elif w == 0:  # S here, dP - delta from consumer 1
        (s,) = _scores(((qo.products(0, k_smem), s_init_j),), interpret)
      else:  # dP - delta to consumer 0; dS back from it
        (dp,) = _scores(((qo.products(1, v_smem), dp_init),), interpret)
        sync.release(1, slot)  # V read
        xchg.put(0, j == 0, dp)
        (ds,) = xchg.take(1, interpret)
        (dq,) = _accumulate((dq,), (lambda: [(ds, qo.narrow(k_smem))],),
                            interpret)
        xchg.release(1)
        sync.release(0, slot)  # K read
        return dq
      sync.release(1, slot)  # V read
      if xchg is not None:
        p_th = probs(s)
      p, th = (*p_th, None)[:2]
      if xchg is not None:
        (dp,) = xchg.take(0, interpret)
      if drop is not None:  # Z dP - delta' (module docstring)
        (dp,) = drop.select([(dp, dp_init)], drop_rows,
                            drop.ring_cols(key_smem, key_bars, slot),
                            interpret)
      then = None
      if dbias_tiles is not None:  # dS of the logits, stored while the dQ
        # GEMM runs
        ds, ds_logits = _ds(p, dp, th, with_logits=True)
        then = lambda: dbias_tiles.put(ds_logits, ki)
      else:
        ds = _ds(p, dp, th)
      ds = ds.astype(dtype)
      if xchg is not None:
        then = lambda: xchg.put(1, j == 0, ds)
      # -- dQ += dS K  [bq, H] (split_head_dim: [bq, H / C]; dS goes to
      # consumer 1 once this consumer's GEMM is issued: run 167, +6-9%)
      (dq,) = _accumulate((dq,), (lambda: [(ds, qo.narrow(k_smem))],),
                          interpret, then=then)
      sync.release(0, slot)  # K read
      return dq

    alibi_tiles = (alibi_split(q_base, q_base + bq - 1, item.offset, bk,
                               True)
                   if fold and not spec.is_causal else None)
    dq = run_steps(item, step, dq, alibi_tiles)
    # -- epilogue: Q is no longer read (every wgmma was awaited;
    # split_head_dim: by any consumer)
    if xchg is not None:
      xchg.drain(1 - w)
      sync.consumers_meet()
    qo.store(0, dq * (scale / (1.0 - rate)), dq_ref, dtype)  # dropout's r
    plgpu.wait_smem_to_gmem(0, wait_read_only=True)

  def _producer():
    load_kv_tiles(item, group, bk, stages, sync, (k_ref, v_ref),
                  (k_smems, v_smems), (k_bars, v_bars),
                  keys=(0, drop.col_ref, key_smem, key_bars)
                  if drop is not None else None, bias=ring)

    @pl.loop(jnp.maximum(0, item.n_steps - stages), item.n_steps)
    def _(j):
      slot = lax.rem(j, stages)
      sync.await_release(0, slot)
      sync.await_release(1, slot)

  _by_role(wg, cfg, _producer, _consumer, cfg.dq_registers)


# --------------------------------------------------------------------------
# Wrapper
# --------------------------------------------------------------------------


def backward(q, k, v, arrays: masks.MaskArrays, out, lse, d_out,
             params: KernelParams, *, delta=None):
  """(dq, dk, dv) of the forward's (out, lse [B, N, T], +inf masked rows);
  with ``params.bias_grad`` also the dbias partial of the full (T, S) bias
  [1 | B, 1 | N, T, S]: [B, N, T, S] in the bias dtype (``_DbiasTiles``;
  the triton backward's contract).  ``delta``: rowsum(dO * O) [B, N, T]
  float32 computed by the caller (then ``out`` is not read and may be
  None); dropout's scaling and the padding still apply."""
  check_supported(params, q, k, v, arrays)
  spec, cap = params.spec, params.logits_soft_cap
  b, t, n, h = q.shape
  _, s, kh, _ = k.shape
  group = n // kh
  hp, cfg = _config(params, q, arrays)
  c = cfg.consumers
  dq_cfg = cfg.dq_kernel()  # its own consumer count
  rows_q = dq_cfg.row_tiles * cfg.block_q_dq
  rows_kv = cfg.row_tiles * cfg.block_kv_dkv
  tp = fwd.round_up(t, math.lcm(rows_q, cfg.block_q_dkv))
  sp = fwd.round_up(s, math.lcm(rows_kv, cfg.block_kv_dq))

  # delta_i = rowsum(dO_i * O_i)  (Alg. 2 line 4); lse in base 2.
  if delta is None:
    delta = row_delta(out, d_out)
  rate = params.dropout_rate
  if rate > 0.0:  # delta' (module docstring)
    delta = delta * (1.0 - rate)
  delta = jnp.pad(delta, ((0, 0), (0, 0), (0, tp - t)))
  lse2 = jnp.pad(lse * _LOG2E, ((0, 0), (0, 0), (0, tp - t)),
                 constant_values=jnp.inf)  # padded rows: P = 0
  pad_rows = lambda x, to: jnp.pad(
      x, ((0, 0), (0, to - x.shape[1]), (0, 0), (0, hp - h)))
  q, do = pad_rows(q, tp), pad_rows(d_out.astype(q.dtype), tp)
  k, v = pad_rows(k, sp), pad_rows(v, sp)

  q_len, kv_len, offset, dense = fwd.mask_inputs(spec, arrays, t, s, tp, sp)
  mask_ops, mask_t = [], []
  if spec.has_segments:
    q_seg, kv_seg = padded_segs = fwd.padded_segments(arrays, tp, sp)
    arrays = arrays._replace(q_segment_ids=q_seg, kv_segment_ids=kv_seg)
    mask_ops = mask_t = padded_segs
  if dense is not None:
    mask_ops = [*mask_ops, dense]
    mask_t = [*mask_t, dense.swapaxes(2, 3)]  # key-major for dK/dV
  alibi = arrays.alibi_slopes is not None
  if alibi:
    slopes = alibi_slopes(arrays, b)
    mask_ops, mask_t = [*mask_ops, slopes], [*mask_t, slopes]
  if rate > 0.0:
    keys = dropout_keys(arrays, tp, sp)
    mask_ops, mask_t = [*mask_ops, *keys], [*mask_t, *keys]
  bias = arrays.bias is not None  # read by both kernels (``BiasRing``)
  dbias = bias and params.bias_grad  # written by the dQ kernel
  if bias:
    bias_op = BiasRing.operand(arrays.bias, tp, sp)
    mask_ops, mask_t = [*mask_ops, bias_op], [*mask_t, bias_op]
  table = functools.partial(fwd.tile_table, spec, arrays, dense, q_len,
                            kv_len, offset)
  common = dict(spec=spec, scale=float(params.scale), cap=cap, cfg=cfg,
                group=group, interpret=params.interpret, alibi=alibi,
                rate=rate, bias=bias)
  stages = cfg.num_stages
  interp = _interpret_barriers(cfg) if params.interpret else ()

  # dK, dV: kv tiles of a kv head launched together, ascending (causal: the
  # first kv tiles are seen by the most query rows: longest first).
  kv_tiles = sp // rows_kv
  kv_table = table(kv_tiles, tp // cfg.block_q_dkv, rows_kv,
                   cfg.block_q_dkv, kv_major=True)
  bq, bk = cfg.block_q_dkv, cfg.block_kv_dkv
  bias_size = fwd.bias_itemsize(arrays)
  kv_smem, kv_bars = _RowTile.allocate(
      cfg, bk, hp, k.dtype, cfg.kv_buffers(hp, q.dtype.itemsize, bias_size))
  smem = [*kv_smem,
          plgpu.SMEM((stages, bq, hp), q.dtype, transforms=_TILED),
          plgpu.SMEM((stages, bq, hp), q.dtype, transforms=_TILED)]
  order = (("heads", kh), ("kv_tiles", kv_tiles), ("batch", b))
  num_items = kh * kv_tiles * b
  num_ctas, sched = 0, []  # persistent: one CTA per SM, items scheduled
  if cfg.persistent:
    num_ctas = fwd.persistent_ctas(num_items, params.interpret)
    coords = schedule.decode(np.arange(num_items), order)
    steps = schedule.tile_steps(spec, t, s, rows_kv, bq, kv_tiles,
                                kv_major=True)
    sched = [jnp.asarray(schedule.list_schedule(
        group * steps[coords["kv_tiles"]], num_ctas))]
  operands = [q, k, v, do, lse2, delta, kv_table, *sched, *mask_t]
  if cfg.split_head_dim:
    smem.append(_Exchange.allocate((bk, bq), q.dtype, with_p=True))
  if cfg.one_kernel:  # dS^T tiles; dQ pieces and dQ in HBM: f32 or the
    # int32 words of fixed point
    dq_dtype = jnp.int32 if cfg.deterministic else jnp.float32
    smem += [plgpu.SMEM((2, c * bk, bq), q.dtype, transforms=_TILED),
             plgpu.SMEM((c, *_dq_share(cfg, hp, 0)[1]), dq_dtype,
                        transforms=(plgpu.TilingTransform((8, 32)),
                                    plgpu.SwizzleTransform(128)))]
    if cfg.deterministic:
      f_scale = fixed_point_scale(do, delta, k, v, group)
      operands.append(f_scale)
    # Interpret mode simulates no TMA reduce-add: each kv tile writes its
    # own slot, summed below (O(S / 128 x T) memory: tests only).
    slots = (kv_tiles,) if params.interpret else ()
    dq_acc = jnp.zeros((*slots, b, tp, n, hp), dq_dtype)
  rings = ()  # the row rings, two TMA copies a slot: dropout's row keys
  # (int32), then lse2 / delta (f32); the kernel pops them in reverse
  for on, shape, dtype in (
      (rate > 0.0, cfg.key_ring_shape, jnp.int32),
      (cfg.row_ring, cfg.row_ring_shape, jnp.float32)):
    if on:
      smem.append(plgpu.SMEM(shape, dtype))
      rings += (plgpu.Barrier(num_arrivals=2, num_barriers=shape[0]),)
  if bias:  # the key-major bias ring, last: [stages, C, bq, bk]
    bias_smem, bias_bars = BiasRing.scratch(stages, bq, bk,
                                            arrays.bias.dtype, parts=c)
    smem.append(bias_smem)
    rings += (bias_bars,)
  dkdv = functools.partial(
      _launch,
      functools.partial(_dkdv_kernel, order=order,
                        persistent=bool(num_ctas), **common),
      "pallas_flash_mosaic_dkdv",
      out_type=(jax.ShapeDtypeStruct((b, sp, kh, hp), k.dtype),) * 2,
      order=order, num_ctas=num_ctas,
      consumers=c, smem=tuple(smem),
      barriers=(*kv_bars,
                plgpu.Barrier(num_barriers=stages),
                plgpu.Barrier(num_barriers=stages), *interp, *rings),
      interpret=params.interpret)
  if not cfg.one_kernel:
    dk, dv = dkdv(operands)
  else:
    # The kernel adds into dQ through a Ref (TMA reduce-add).  run_state
    # keeps the Ref inside a pure function: a top-level jax.new_ref would
    # give the call an effect, which custom_partitioning cannot lower
    # (sharding.py refuses effectful backend calls).
    def fused(refs):
      acc, dk_ref, dv_ref = refs
      dk_ref[...], dv_ref[...] = dkdv([*operands, acc])
    dq, dk, dv = pl.run_state(fused)(
        (dq_acc, *(jnp.zeros((b, sp, kh, hp), k.dtype),) * 2))
    if params.interpret:  # (integer words: the same sums in any order)
      dq = dq.sum(0, dtype=dq.dtype)
    if cfg.deterministic:
      dq = from_fixed(dq, f_scale.transpose(0, 2, 1)[..., None])
    dq = (dq * (params.scale / (1.0 - rate))).astype(q.dtype)  # dropout's r
    return dq[:, :t, :, :h], dk[:, :s, :, :h], dv[:, :s, :, :h]

  # dQ: the q tiles of a head launched together.
  q_tiles = tp // rows_q
  q_table = table(q_tiles, sp // cfg.block_kv_dq, rows_q, cfg.block_kv_dq)
  bq, bk = cfg.block_q_dq, cfg.block_kv_dq
  q_smem, q_bars = _RowTile.allocate(dq_cfg, bq, hp, q.dtype)
  dq_interp = _interpret_barriers(dq_cfg) if params.interpret else ()
  dq_c = dq_cfg.consumers
  out_type = [jax.ShapeDtypeStruct((b, tp, n, hp), q.dtype)]
  bias_smem, bias_bars = [], []  # the bias ring (query-major), last; then
  if bias:  # dbias's staging tiles [C, bq, bk]
    ring_smem, ring_bars = BiasRing.scratch(stages, dq_c * bq, bk,
                                            arrays.bias.dtype)
    bias_smem, bias_bars = [ring_smem], [ring_bars]
  if dbias:
    bias_smem.append(plgpu.SMEM((dq_c, bq, bk), arrays.bias.dtype,
                                transforms=_TILED))
    # dbias at the bias operand's T, S (TMA drops the stores past them)
    out_type.append(jax.ShapeDtypeStruct((b, n, *bias_op.shape[2:]),
                                         arrays.bias.dtype))
  dq, *dbias_out = _launch(
      functools.partial(_dq_kernel, num_q_tiles=q_tiles, dbias=dbias,
                        **{**common, "cfg": dq_cfg}),
      "pallas_flash_mosaic_dq",
      [q, k, v, do, lse2, delta, q_table, *mask_ops],
      out_type=tuple(out_type),
      order=(("heads", n), ("q_tiles", q_tiles), ("batch", b)),
      consumers=dq_c,
      smem=(*q_smem,
            plgpu.SMEM((stages, bk, hp), k.dtype, transforms=_TILED),
            plgpu.SMEM((stages, bk, hp), k.dtype, transforms=_TILED),
            *([_Exchange.allocate((bq, bk), q.dtype, with_p=False)]
              if cfg.split_head_dim else []),
            *([plgpu.SMEM((stages, bk), jnp.int32)] if rate > 0.0 else []),
            *bias_smem),
      barriers=(*q_bars,
                plgpu.Barrier(num_barriers=stages),
                plgpu.Barrier(num_barriers=stages), *dq_interp,
                *([plgpu.Barrier(num_barriers=stages)] if rate > 0.0 else []),
                *bias_bars),
      interpret=params.interpret)
  grads = (dq[:, :t, :, :h], dk[:, :s, :, :h], dv[:, :s, :, :h])
  if dbias:
    return (*grads, dbias_out[0][:, :, :t, :s])
  return grads
