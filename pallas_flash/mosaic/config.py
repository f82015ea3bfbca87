"""Tile shapes of the Mosaic GPU (Hopper) forward.

A frozen, validated config and the frozen per-(head dim, causal) table that
``MosaicConfig.default`` reads.  The measured number behind every entry is
written beside it (H200 unless named, JAX 0.11.2, bf16, the
FlashAttention-paper workload); docs/design.md has the decisions, and the
run-by-run history is at commit 29bf24f (``git show 29bf24f:docs/mosaic.md``).
"""
from __future__ import annotations

import dataclasses
import math

# The persistent kernel's epilogue stores O in [block_q, OUT_COLS] pieces
# through out_slots(H) shared-memory slots per consumer (two: one piece is
# written while the previous one's TMA store reads), so Q's buffer stays free
# for the next work item's Q and d256 still fits 227 KiB.
OUT_COLS = 64


def out_slots(head_dim: int) -> int:
  return min(2, -(-head_dim // OUT_COLS))


@dataclasses.dataclass(frozen=True, kw_only=True)
class MosaicConfig:
  """Blocks of the warp-specialised forward.

  Attributes:
    block_q: query rows per *consumer warpgroup*; a CTA holds ``consumers``
      of them, i.e. ``consumers * block_q`` query rows (FA3 Sec. 3.1).
    block_kv: key/value rows per pipeline stage (one TMA copy each of K, V).
    num_stages: depth of the shared-memory K/V ring filled by the producer
      warpgroup.
    consumers: consumer warpgroups per CTA, 2 or 3, taking turns on the
      tensor cores in a ring (FA3 runs 3 at head dim 64: each softmax then
      hides behind two other warpgroups' GEMMs).  With 3, registers per
      consumer thread drop from 232 to 160 (d64's persistent form fits
      them; d128's spills).
    heads_inner: launch order; the batch rows of a (head, q tile) are
      always adjacent.  False: then the q tiles of one head, heads slowest
      (a wave of CTAs reads few heads' K/V, which stay in L2); True: then
      the heads of one q tile, q tiles slowest (with causal masking the
      longest tiles then run first).  Persistent kernels take the heads in
      groups whose K/V fit ``head_group_mib``, q tiles slowest within a
      group, so that the items running at once read few heads' K/V.
    head_group_mib: with ``persistent`` and ``heads_inner``, the most K/V
      bytes (MiB, all batch rows) of one group of heads; at least one head.
      Hopper's L2 is 50 MB.
    masked_first: visit the kv tiles that need an element-wise mask first
      (one masked and one plain loop body) instead of in ascending order
      (masked, plain, masked: three loop bodies).
    overlap_softmax: issue S(j) = Q K_j^T together with O += P(j-1) V(j-1)
      and run softmax(j) while the P V GEMM is in flight (FA3 Sec. 3.2,
      intra-warpgroup overlap, on top of the ping-pong between the two
      consumers).  Holds one more score tile in registers.
    backward: tiles of the Mosaic GPU backward (``MosaicBackwardConfig``);
      None takes ``MosaicBackwardConfig.default``.
    persistent: launch one CTA per SM; each loops over the work items (q
      tiles of a (batch, head)) that a trace-time list schedule gave it
      (``schedule.py``: each item of the launch order to the CTA with the
      least work so far), with the K/V ring running on across items and the
      next item's Q loaded while the current one finishes (FA3 Sec. 3.1,
      persistent kernel: no CTA launch, prologue or pipeline refill per
      item).  With causal masking use ``heads_inner``: the items are then
      taken longest first (within groups of heads, ``head_group_mib``).
    row_tree: 0, or a column count c: the softmax's row max and row sum
      first combine the score tile's column halves element-wise (independent
      registers) down to c columns, then reduce those in Mosaic GPU's
      per-thread chain and lane shuffles (``forward._row_reduce``).
    reduce_ilp: 0, or Mosaic GPU's ``acc_ilp`` for the row max and row sum
      (``forward._row_reduce``): more independent accumulators a row
      without ``row_tree``'s element-wise temporaries (``default``: 16 on
      d256).  Interpret mode keeps jnp's reduction.
    alibi_fma_keys: the ALiBi key vector of a step (tiles on one side of the
      diagonal) by one FFMA a key (``score_tiles.scaled_key_positions``)
      instead of an IADD3, an I2FP and an FMUL; not with a bias, nor at
      block_kv 64 (Mosaic GPU's layout inference finds no solution there).
  """

  block_q: int = 64
  block_kv: int = 128
  num_stages: int = 2
  consumers: int = 2
  heads_inner: bool = False
  head_group_mib: float = 4
  masked_first: bool = True
  overlap_softmax: bool = False
  persistent: bool = False
  row_tree: int = 0
  reduce_ilp: int = 0
  alibi_fma_keys: bool = True
  bias_with_k: bool = False  # the bias tile copied with K and freed with
  # K's slot, not V's (``with_bias`` sets it)
  backward: "MosaicBackwardConfig | None" = None  # None: its table default

  def __post_init__(self):
    if self.block_q != 64:
      # A wgmma M-tile per warpgroup is 64 rows; 128 rows per warpgroup would
      # need two accumulators per warpgroup, which this kernel does not do.
      raise ValueError(f"block_q={self.block_q} must be 64")
    if self.block_kv not in (64, 128, 192, 256):
      raise ValueError(f"block_kv={self.block_kv} must be 64, 128, 192 or 256")
    if not (isinstance(self.head_group_mib, (int, float))
            and self.head_group_mib > 0):
      raise ValueError(f"head_group_mib={self.head_group_mib} must be a "
                       "number > 0")
    if not (isinstance(self.row_tree, int) and self.row_tree >= 0
            and self.row_tree & (self.row_tree - 1) == 0
            and (self.row_tree == 0 or self.row_tree >= 8)):
      raise ValueError(f"row_tree={self.row_tree} must be 0 or a power of "
                       "two >= 8")
    if not (isinstance(self.reduce_ilp, int) and 0 <= self.reduce_ilp <= 64
            and self.reduce_ilp & (self.reduce_ilp - 1) == 0):
      raise ValueError(f"reduce_ilp={self.reduce_ilp} must be 0 or a power "
                       "of two <= 64")
    if self.consumers not in (2, 3):
      raise ValueError(f"consumers={self.consumers} must be 2 or 3")
    # Each stage takes two of the CTA's 16 named barriers; 4 + consumers go
    # before them (pipeline.BAR_TURN).
    top = (12 - self.consumers) // 2
    if not (isinstance(self.num_stages, int) and 2 <= self.num_stages <= top):
      raise ValueError(f"num_stages={self.num_stages} must be an int in "
                       f"[2, {top}] with consumers={self.consumers}")

  def smem_bytes(self, head_dim: int, itemsize: int = 2,
                 fp8: bool = False, bias_itemsize: int = 0) -> int:
    """Shared memory the kernel asks for (Q tiles, K/V ring, O store slots,
    LSE, barriers).  ``fp8``: Q, K, V of 1 byte and bf16 O slots always (O
    is wider than Q's buffer).  ``bias_itemsize`` > 0: the bias ring too,
    one [consumers * block_q, block_kv] tile per stage (``bias_ring_bytes``)."""
    c = self.consumers
    o_itemsize = itemsize
    if fp8:
      itemsize, o_itemsize = 1, 2
    q = c * self.block_q * head_dim * itemsize
    kv = 2 * self.num_stages * self.block_kv * head_dim * itemsize
    o = c * out_slots(head_dim) * self.block_q * OUT_COLS * o_itemsize
    o *= self.persistent or fp8  # else O reuses Q's buffer
    bias = self.bias_ring_bytes(bias_itemsize)
    return q + kv + o + c * self.block_q * 4 + 1024 + bias

  def bias_ring_bytes(self, itemsize: int) -> int:
    """The forward's bias ring: a [consumers * block_q, block_kv] tile of
    the bias (its own dtype) per stage, beside K / V."""
    return (self.num_stages * self.consumers * self.block_q * self.block_kv
            * itemsize)

  def with_bias(self, head_dim: int, itemsize: int = 2,
                causal: bool = False) -> "MosaicConfig":
    """This config with room for the bias ring in 227 KiB: two consumers
    at most, then the same one where it fits, else, in order, block_kv 128
    (from 256), not persistent (no O store slots), block_kv 64.  d64 takes
    two consumers and block_kv 128 (146-162 KiB), d128 not persistent
    (225.5 KiB), d256 its table entry (225.5 KiB).

    Two consumers: d64 non-causal takes three from S = 16384 keys, whose
    192-row tiles leave a power-of-two T unaligned, so the bias operand
    was zero-padded in XLA (``BiasRing.operand``: the whole [.., T, S]
    bias read and written again) on every call.  Forward TFLOP/s with a
    [1, N, T, S] bias, three vs two (H200, 2026-11-29): S16384 132 vs 288,
    S32768 (4 heads) 126 vs 294; the gaps, 8.9 and 5.0 ms, are what a copy
    of the 16 / 8 GiB bias takes at ~3.6 TB/s.

    ``causal``: where the next step would drop the persistent launch, it
    keeps it with block_kv 64 and three stages if that fits (d128: 209.5
    KiB).  H200, 2026-11-28, bwd_bench.py --bias, forward TFLOP/s against
    the non-persistent form in one process: S4k C 386 vs 344, S16k C 398
    vs 375 (fwd+bwd +4.2 / +1.6%).  Non-causal not taken: three consumers
    with block_kv 64 ran 216 against 461 (S16k N), and the persistent form
    is not measured there.

    ``bias_with_k``: the bias tile rides with K, freed with K's slot, so the
    producer issues it about two steps ahead; with V (freed during the next
    step in the softmax-overlap form) it came half a step ahead.  Forward
    TFLOP/s with the bias with K vs with V (bwd_bench.py --bias, H200,
    2026-11-29, one process): d128 S4k N 472 vs 378 (fwd+bwd 353 vs 334;
    the overlap off instead: 431), d128 S4k C 387 vs 387, d128 S16k C 381
    vs 380, d64 S4k N 298 vs 299.  Same shared memory either way."""
    fits = lambda cfg: (cfg.smem_bytes(head_dim, bias_itemsize=itemsize)
                        <= 227 * 1024)
    cfg = dataclasses.replace(self, bias_with_k=True)
    if cfg.consumers == 3:
      cfg = dataclasses.replace(cfg, consumers=2)
    for change in (dict(block_kv=min(cfg.block_kv, 128)),
                   dict(persistent=False), dict(block_kv=64)):
      if fits(cfg):
        return cfg
      if causal and cfg.persistent and "persistent" in change:
        kept = dataclasses.replace(cfg, block_kv=64, num_stages=3)
        if fits(kept):
          return kept
      cfg = dataclasses.replace(cfg, **change)
    return cfg

  @classmethod
  def default(cls, head_dim: int, causal: bool,
              every_tile_masked: bool = False,
              kv_seqlen: int = 0, dropout: bool = False,
              q_seqlen: int = 0, alibi: bool = False,
              window: bool = False, fp8: bool = False,
              bias: bool = False) -> "MosaicConfig":
    """The tuned entry for a (padded) head dim and the call's features.
    The figures behind each rule are in docs/design.md ("The forward config
    table", "The fp8 forward", "Row max and row sum"); the runs named there
    are in the history at commit 29bf24f.

    - The table entry (``_TABLE``) by head dim and causality.
    - Three consumers, block_kv 128, not persistent, by the shorter
      sequence: d64 from 4096 (fp8 and dropout too) without ALiBi, a
      window, every tile masked or a bias (the bias ring would take the
      third consumer away again, ``with_bias``); d64 non-causal also from
      kv_seqlen 16384 with any feature.  d128 from 16384 (causal: with a
      bias only beside dropout) without ALiBi, a window or every tile
      masked (three serialize ALiBi's wgmmas), and without the softmax
      overlap.  A 192-row CTA skips the steps its consumers have no
      visible score in (``forward``'s ``idle_step``), which made d64 S4k
      win.
    - d64 causal on two consumers: block_kv 256 from kv_seqlen 16384.
    - every_tile_masked (segment ids, a dense mask): no softmax overlap, not
      persistent.  Dropout at d128: no softmax overlap.
    - fp8: block_kv >= 128 (V^T's tiles are swizzled by 128 bytes along the
      keys), no softmax overlap; d128 on three consumers, block_kv 128, not
      persistent at every length (where ALiBi, a window or every tile
      masked keep two: non-causal block_kv 256); d64 non-causal on three at
      every length.
    - d64 with ALiBi (bf16, no dropout, window, mask or bias): three
      consumers from 4096, block_kv 128, persistent only causal (its
      non-causal persistent form spills 76 bytes).
    - d64's three consumers from 4096 (the rule above) run persistent, with
      dropout too; fp8 only causal below 16384.  d128's three stay one item
      a CTA: the persistent form spills at 128 registers (ptxas: 116-156
      bytes and serialized wgmmas bf16, 24-240 bytes fp8).
    - row_tree 8 on d128's two-consumer overlap entries, 32 on d64
      non-causal block_kv 256; reduce_ilp 16 on d256; only without fp8,
      dropout, ALiBi, a window or every tile masked.
    """
    key = (64 if head_dim <= 64 else 128 if head_dim <= 128 else 256, causal)
    cfg = _TABLE[key]
    if key == (64, True) and kv_seqlen >= 16384:
      cfg = dataclasses.replace(cfg, block_kv=256)
    # the three-consumer rules: the shorter sequence decides, and ALiBi, a
    # window or every tile masked keep two consumers
    shorter = min(q_seqlen or kv_seqlen, kv_seqlen)  # (0: unknown)
    three_fit = not (alibi or window or every_tile_masked)
    d64_three = three_fit and not bias  # (2026-11-30 rules)
    if key == (64, False) and (kv_seqlen >= 16384
                               or (shorter >= 4096 and d64_three)):
      cfg = dataclasses.replace(cfg, block_kv=128, consumers=3)
    if key == (64, True) and shorter >= 4096 and d64_three:
      cfg = dataclasses.replace(cfg, block_kv=128, consumers=3,
                                persistent=False)
    # d64 with ALiBi from 4096 (2026-11-30, third session; bf16, without
    # dropout): three consumers, persistent only causal (non-causal spills)
    if (key[0] == 64 and alibi and shorter >= 4096 and not (
        window or every_tile_masked or bias or dropout or fp8)):
      cfg = dataclasses.replace(cfg, block_kv=128, consumers=3,
                                persistent=causal)
    if key == (128, False) and shorter >= 16384 and three_fit:
      cfg = dataclasses.replace(cfg, consumers=3, persistent=False,
                                overlap_softmax=False)
    if every_tile_masked:
      cfg = dataclasses.replace(cfg, overlap_softmax=False, persistent=False)
    if dropout and key[0] == 128:
      cfg = dataclasses.replace(cfg, overlap_softmax=False)
    if (key == (128, True) and shorter >= 16384 and three_fit
        and (dropout or not bias)):
      cfg = dataclasses.replace(cfg, consumers=3, persistent=False,
                                overlap_softmax=False)
    if fp8:
      cfg = dataclasses.replace(cfg, block_kv=max(cfg.block_kv, 128),
                                overlap_softmax=False)
      if key[0] == 128 and three_fit:
        cfg = dataclasses.replace(cfg, consumers=3, block_kv=128,
                                  persistent=False)
      elif key == (128, False):
        cfg = dataclasses.replace(cfg, block_kv=256)
      if key == (64, False):
        cfg = dataclasses.replace(cfg, block_kv=128, consumers=3,
                                  persistent=False)
    # three persistent consumers at d64 (2026-11-30 rules): bf16 S4k C / N
    # +4 / +4%, S16k +1%, dropout's S4k +4%; fp8 S4k C +4%, N level, S16k -2%
    if (key[0] == 64 and cfg.consumers == 3 and shorter >= 4096 and d64_three
        and (not fp8 or (causal and shorter < 16384))):
      cfg = dataclasses.replace(cfg, persistent=True)
    # the row reductions' forms, only where measured: none of these features
    if not (fp8 or dropout or alibi or every_tile_masked or window):
      if key[0] == 128 and cfg.consumers == 2 and cfg.overlap_softmax:
        cfg = dataclasses.replace(cfg, row_tree=8)
      elif key == (64, False) and cfg.consumers == 2 and cfg.block_kv == 256:
        cfg = dataclasses.replace(cfg, row_tree=32)
      elif key[0] == 256:
        cfg = dataclasses.replace(cfg, reduce_ilp=16)
    return cfg


# Shared memory per CTA on Hopper is 227 KiB; the entries stay inside it for
# every head dim they cover (d <= 256 pads to a multiple of 64).  Measured on
# H200 2026-11-21 (history at commit 29bf24f; same-run differences under ~4%
# are noise):
# * d64 non-causal: block_kv=256 beats 128 by 3-6% (S4k 431-439 vs 412-428
#   TFLOP/s, S16k 460-470 vs 441-453): half as many turns of the ring.
# * d64 causal: block_kv=128 (S4k 364-386 vs 350-383 with 256: the diagonal
#   tile wastes more of a wider tile); from S = 16k on 256 (3-8% faster
#   there, see ``default``).
# * d64: no softmax overlap (S16k 395-433 with it vs 443-464 without: at d64
#   the consumers are softmax-bound and the second score tile costs more than
#   the overlap saves).
# * d128: block_kv=128, 2 stages (64 x 3 or 4 stages: 15-20% slower, run 2),
#   softmax overlap on (run 9: S16k N 596-607 vs 590-596, S16k C 602-608 vs
#   587-588, S4k C 523-534 vs 519, S4k N equal).
# * d128 non-causal: persistent (session 3 run 1: S4k 580 vs 566, S16k 612
#   vs 589).  Not for d64 / d256 non-causal (434-454 vs 435-460, 501 vs
#   520).
# * causal (d64 and d128): persistent with heads_inner, the items of groups
#   of heads whose K/V fit 4 MiB taken longest first and list-scheduled
#   (schedule.py).  Run back to back for 3 s x 2 rounds at the ~690 W power
#   cap (session 5, sustained.py): d128 S4k 531 vs 499 non-persistent,
#   S16k 607 vs 581; d64 S4k 383 vs 372, S16k 445 vs 447.  Groups of 16 MiB:
#   523 / 606 / 384 / 445; no groups (every head's K/V read at once, from
#   HBM): 471 / 577 / 337 / 420 with the clock down from ~1650-1900 to
#   1455-1758 MHz.  (Session 4 dealt the items in reversed rounds instead
#   of by list scheduling; with head groups that left CTAs 1.3-1.6x the
#   mean work.)
# * d128 non-causal persistent holds up back to back (S4k 564 vs 553-556,
#   S16k 597 vs 592-593, session 5; the overlap off loses too).
# * d256 persistent loses back to back (session 5: N 468-471 vs 488, C
#   378-384 vs 394).
# * d256: block_kv=64, 2 stages (all that fits), ascending order (the JAX /
#   tokamax order: 8-15% over masked-first before the overlap existed), softmax
#   overlap on (run 9: N 510-520 vs 497-504, C 409 vs 397).
_TABLE = {
    (64, False): MosaicConfig(block_q=64, block_kv=256, num_stages=2),
    (64, True): MosaicConfig(block_q=64, block_kv=128, num_stages=2,
                             heads_inner=True, persistent=True),
    (128, False): MosaicConfig(block_q=64, block_kv=128, num_stages=2,
                               overlap_softmax=True, persistent=True),
    (128, True): MosaicConfig(block_q=64, block_kv=128, num_stages=2,
                              heads_inner=True, overlap_softmax=True,
                              persistent=True),
    (256, False): MosaicConfig(block_q=64, block_kv=64, num_stages=2,
                               masked_first=False, overlap_softmax=True),
    (256, True): MosaicConfig(block_q=64, block_kv=64, num_stages=2,
                              masked_first=False, overlap_softmax=True),
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class MosaicBackwardConfig:
  """Blocks of the Mosaic GPU backward (``backward.py``: a dK/dV kernel and a
  dQ kernel, each with one producer and ``consumers`` warpgroups).

  Attributes:
    block_kv_dkv: key rows per consumer warpgroup of the dK/dV kernel (a CTA
      holds ``consumers`` of them); its dK and dV accumulators are
      [block_kv_dkv, H] f32 in registers.
    block_q_dkv: query rows per step of the dK/dV kernel (one TMA copy each
      of Q and dO into the ring).
    block_q_dq: query rows per consumer warpgroup of the dQ kernel.
    block_kv_dq: key rows per step of the dQ kernel (one TMA copy each of K
      and V into the ring).
    num_stages: depth of both kernels' shared-memory rings.
    consumers: consumer warpgroups per CTA, 2 or 3 (3: the two-kernel form
      without ``split_head_dim`` only; registers per consumer thread drop
      from 232 to 160, as in the forward).
    dq_consumers: the dQ kernel's own count, 2 or 3; None: ``consumers``.
      Its dQ accumulator is [block_q_dq, H] f32 (64 registers per thread at
      d128, against dK + dV's 128 in the dK/dV kernel), so three consumers
      fit there where they do not in the dK/dV kernel.
    dq_rows_in_registers: how many of the dQ kernel's row tiles (Q, then
      dO) each consumer loads into registers once, as the register A
      operand of its score GEMMs (S = Q K^T, dP = dO V^T): 0, 1 or 2.  Each
      costs 32 registers per thread at d128 and takes a [block_q_dq, H]
      operand off the shared-memory reads of every step.
    masked_first: visit the tiles that need an element-wise mask first.
    stagger_consumers: each kernel's consumer w > 0 waits, once,
      for consumer w - 1's first score GEMMs before its own, so the
      consumers run half a step apart (``backward._Stagger``).  The d128
      default where causal with ALiBi, or non-causal with a soft-cap.
    fused: one kernel (five GEMMs per step instead of seven, as FA3's
      backward): the dK/dV kernel also computes each step's dQ share
      (each consumer a column block of the CTA's share, or a row block
      where block_q_dkv = 64 * consumers, one step late) and adds it to dQ
      in HBM with TMA reduce-add.  With ``deterministic`` the adds are
      integers (fixed point, an int32 word per element: sums in any
      order give the same bits); without, f32.  Needs num_stages=2.
      False: dQ in its own kernel.
    deterministic: True (default): identical bits run to run (two kernels
      summing every gradient in registers in a fixed order, or ``fused``
      with fixed-point adds).  False: the fused kernel with f32 adds, in
      an order that varies run to run.
    persistent: the dK/dV kernel (fused or not) launches one CTA per SM,
      each running the kv tiles that a trace-time list schedule gives it
      (``schedule.py``, longest first where causal); the Q / dO ring runs
      on across a CTA's items, so the next item's first tiles load while
      the consumers store dK / dV (FA3 Sec. 3.1's persistent kernel), and
      where two sets of K / V tiles fit (``kv_buffers``) the next item's K
      and V load during this one.
    split_head_dim: the consumers of a CTA share one row tile (dK/dV: of K
      and V; dQ: of Q and dO) and each accumulates 1 / consumers of the head
      dim's columns, recomputing the score tiles (FA3's d256 answer to
      registers: dK + dV of [64, 256] f32 alone would take 256 per thread).
      The default from head dim 129 on, which it pads to a multiple of 128.
    prefetch_rows: the dK/dV kernel (two kernels, not split_head_dim) loads
      the next step's lse2 and delta while the step's dV / dK GEMMs run,
      instead of at the step's start, ahead of the score GEMMs whose
      accumulators they initialise.  The d128 default without dropout or
      ALiBi (the cases measured), with ``row_ring`` since run 242.
    row_ring: the dK/dV kernel's producer copies each step's lse2 and
      delta rows by TMA into a ring beside Q / dO ([stages, 2, block_q_dkv]
      f32, ``row_ring_shape``), and the consumers read them from shared
      memory, instead of loading them from global memory at the step's
      start.  The d64 and d256 defaults without dropout (the fused and
      split kernels, whose registers do not hold the rows ahead).  With
      ``prefetch_rows`` too, the ring has ``num_stages + 1`` slots and the
      producer copies step i + 1's rows with step i's Q / dO, so the
      consumers read them from shared memory one step ahead, under the dV /
      dK GEMMs, instead of loading them from global memory there.
    dkdv_registers: registers per consumer thread of the dK/dV kernel
      (``setmaxnreg``), with two consumers: 232 (the producer keeps 40) or
      240 (the producer 24, FA3's split).  None: 240 in the fused kernel,
      232 in the two-kernel form.
    dq_registers: the same for the dQ kernel (None: 232).
    alibi_fixed_keys: ALiBi's positions in the dK/dV kernel (``fwd.AlibiTile``
      with a fixed axis): the item's key positions fixed and the query
      vector recomputed each step (True), or the query positions fixed
      (False): then the query vector [block_q_dkv] is loop-invariant, held
      in registers across the steps (ptxas, H200 2026-11-29, d64 S4k N
      with ALiBi: the fused dK/dV kernel spilled 1068 / 2676 bytes stored
      / loaded, against 124 / 260 without ALiBi).
    alibi_fma_queries: with ``alibi_fixed_keys``, the dK/dV kernel's
      per-step query vector by one FFMA a query
      (``score_tiles.scaled_key_positions``) instead of an IADD3, an I2FP and
      an FMUL a query, where block_q_dkv is 128 (d64's fused kernel; Mosaic
      GPU's layout inference finds no solution at 64).  H200, 2026-11-29
      (benchmarks/bwd_bench.py --alibi, backward TFLOP/s, one process):
      d64 S4k N 378 vs 360, S4k C 359 vs 340.
  """

  block_kv_dkv: int = 64
  block_q_dkv: int = 64
  block_q_dq: int = 64
  block_kv_dq: int = 64
  num_stages: int = 2
  consumers: int = 2
  dq_consumers: int | None = None  # None: consumers
  dq_rows_in_registers: int = 0
  masked_first: bool = True
  stagger_consumers: bool = False
  deterministic: bool = True
  split_head_dim: bool = False
  fused: bool = False
  persistent: bool = False
  prefetch_rows: bool = False
  row_ring: bool = False
  dkdv_registers: int | None = None  # None: 240 fused, else 232
  dq_registers: int | None = None  # None: 232
  alibi_fixed_keys: bool = True
  alibi_fma_queries: bool = True

  def __post_init__(self):
    for name in ("block_kv_dkv", "block_q_dq"):
      if getattr(self, name) != 64:  # one wgmma M-tile per warpgroup
        raise ValueError(f"{name}={getattr(self, name)} must be 64")
    for name in ("block_q_dkv", "block_kv_dq"):
      if getattr(self, name) not in (64, 128):
        raise ValueError(f"{name}={getattr(self, name)} must be 64 or 128")
    for name in ("consumers", "dq_consumers"):
      value = getattr(self, name)
      if value is None and name == "dq_consumers":
        continue
      if value not in (2, 3):
        raise ValueError(f"{name}={value} must be 2 or 3")
      if value == 3 and (self.one_kernel or self.split_head_dim):
        # _DsTiles and _Exchange pass tiles within a pair of consumers.
        raise ValueError(f"{name}=3 needs fused=False, deterministic=True "
                         "and split_head_dim=False")
    if self.dq_rows_in_registers not in (0, 1, 2):
      raise ValueError(f"dq_rows_in_registers={self.dq_rows_in_registers} "
                       "must be 0, 1 or 2")
    if self.prefetch_rows and (self.one_kernel or self.split_head_dim):
      raise ValueError("prefetch_rows needs fused=False, deterministic=True "
                       "and split_head_dim=False (the two-kernel dK/dV kernel)")
    if self.row_ring and self.prefetch_rows and self.persistent:
      # (a short item's rows would be copied over before they are read)
      raise ValueError("row_ring=True with prefetch_rows=True needs "
                       "persistent=False")
    for name, c in (("dkdv_registers", self.consumers),
                    ("dq_registers", self.dq_consumers or self.consumers)):
      value = getattr(self, name)
      if value not in (None, 232, 240) or (value is not None and c != 2):
        raise ValueError(f"{name}={value} must be None, 232 or 240, with "
                         "two consumers")
    if self.dq_rows_in_registers and self.split_head_dim:
      raise ValueError("dq_rows_in_registers needs split_head_dim=False (a "
                       "consumer reads every column block of the row tile)")
    if self.split_head_dim and not self.deterministic:
      raise ValueError("split_head_dim=True needs deterministic=True (the "
                       "fused dQ kernel holds a whole row tile per consumer)")
    if self.one_kernel and self.num_stages > 2:
      # backward._DsTiles takes 8 named barriers after the Q / dO slots'.
      raise ValueError(f"num_stages={self.num_stages} must be 2 with "
                       "fused=True or deterministic=False")
    if self.split_head_dim and self.fused:
      raise ValueError("split_head_dim=True needs fused=False")
    if self.split_head_dim and self.num_stages > 3:
      # backward._Exchange takes 4 more named barriers.
      raise ValueError(f"num_stages={self.num_stages} must be <= 3 with "
                       "split_head_dim=True")
    # Each kernel takes two named barriers per stage after the first
    # 4 + consumers (pipeline.Sync): 16 per CTA allow 5 stages with 2
    # consumers, 4 with 3.
    top = (12 - max(self.consumers, self.dq_consumers or 0)) // 2
    if not (isinstance(self.num_stages, int)
            and 2 <= self.num_stages <= top):
      raise ValueError(f"num_stages={self.num_stages} must be an int in "
                       f"[2, {top}]")

  @property
  def one_kernel(self) -> bool:
    """The fused kernel (dQ added from the dK/dV kernel)."""
    return self.fused or not self.deterministic

  @property
  def row_tiles(self) -> int:
    """Row tiles a CTA holds: one per consumer, or one shared by all of them
    with ``split_head_dim``."""
    return 1 if self.split_head_dim else self.consumers

  def dq_kernel(self) -> "MosaicBackwardConfig":
    """The config the dQ kernel runs with (``dq_consumers`` consumers)."""
    return dataclasses.replace(self, consumers=self.dq_consumers
                               or self.consumers, dq_consumers=None,
                               dkdv_registers=None)

  def kv_buffers(self, head_dim: int, itemsize: int = 2,
                 bias_itemsize: int = 0) -> int:
    """K / V tile sets of the dK/dV kernel: 2 where ``persistent`` (the next
    item's tiles load while this one runs) and they fit in shared memory
    (not with ``split_head_dim``), else 1."""
    if not self.persistent or self.split_head_dim:
      return 1
    keys = math.prod(self.key_ring_shape) * 4  # (int32; with dropout)
    fits = self._smem_bytes(head_dim, itemsize, 2,
                            bias_itemsize) + keys <= 227 * 1024
    return 2 if fits else 1

  @property
  def key_ring_shape(self) -> tuple[int, int, int]:
    """Dropout's row keys (int32 r_i, m_i) beside Q / dO in the dK/dV
    kernel: [stages, 2, block_q_dkv]."""
    return (self.num_stages, 2, self.block_q_dkv)

  @property
  def row_ring_shape(self) -> tuple[int, int, int]:
    """``row_ring``'s lse2 and delta (f32) beside Q / dO in the dK/dV
    kernel: [slots, 2, block_q_dkv], one slot more than the stages with
    ``prefetch_rows`` (its rows are copied a step ahead of Q / dO)."""
    return (self.num_stages + self.prefetch_rows, 2, self.block_q_dkv)

  def smem_bytes(self, head_dim: int, itemsize: int = 2,
                 bias_itemsize: int = 0) -> int:
    """Shared memory of the larger of the two kernels; ``bias_itemsize`` >
    0: with a bias of that many bytes an element (``bias_bytes``)."""
    return self._smem_bytes(
        head_dim, itemsize,
        self.kv_buffers(head_dim, itemsize, bias_itemsize), bias_itemsize)

  def _smem_bytes(self, head_dim: int, itemsize: int, kv_buffers: int,
                  bias_itemsize: int = 0):
    """The larger kernel's bytes: each kernel counts only its own buffers
    (the fused kernel is the only one, so the dQ kernel's K / V ring never
    counts there; until run 202 it did, and a fused d128 config with
    128-key dQ steps fell back to the triton backward)."""
    c, st = self.consumers, self.num_stages
    dkdv = 2 * (kv_buffers * self.row_tiles * self.block_kv_dkv
                + st * self.block_q_dkv) * head_dim * itemsize
    dq = 2 * (self.dq_kernel().row_tiles * self.block_q_dq
              + st * self.block_kv_dq) * head_dim * itemsize
    if self.split_head_dim:  # the consumers' score-tile exchange
      dkdv += self.block_kv_dkv * self.block_q_dkv * (4 + 2 * itemsize)
      dq += self.block_q_dq * self.block_kv_dq * (4 + itemsize)
    if self.one_kernel:  # 2 dS^T tiles of the CTA; dQ pieces (f32 or
      # fixed-point int32 words); no dQ kernel
      dkdv += self.block_q_dkv * (2 * c * self.block_kv_dkv * itemsize
                                  + head_dim * 4)
      dq = 0
    if self.row_ring:  # the dK/dV kernel's lse2 / delta rows (f32)
      dkdv += math.prod(self.row_ring_shape) * 4
    if bias_itemsize:
      dkdv_bias, dq_bias = self.bias_bytes(bias_itemsize)
      dkdv += dkdv_bias
      dq += dq_bias if dq else 0
    return max(dkdv, dq) + 1024

  def bias_bytes(self, itemsize: int = 2) -> tuple[int, int]:
    """(dK/dV kernel, dQ kernel) shared memory of a bias (``backward``,
    ``score_tiles.BiasRing``): each kernel's bias ring, one tile per stage of
    the step's query rows against the CTA's keys ([block_q_dkv, consumers
    * block_kv_dkv] in the dK/dV kernel, [dq consumers * block_q_dq,
    block_kv_dq] in the dQ kernel), and the dQ kernel's dbias staging, a
    [block_q_dq, block_kv_dq] tile per consumer (counted with or without a
    gradient of the bias: the backend is chosen before that is known)."""
    dkdv = self.num_stages * self.block_q_dkv * self.consumers * (
        self.block_kv_dkv)
    dq = (self.num_stages + 1) * self.dq_kernel().consumers * (
        self.block_q_dq * self.block_kv_dq)
    return dkdv * itemsize, dq * itemsize

  def with_bias(self, head_dim: int, itemsize: int = 2
                ) -> "MosaicBackwardConfig":
    """This config in the form that takes a bias (two kernels, not
    ``split_head_dim``: the bias ring and dbias are built into those), with
    room for the bias in 227 KiB: the same one where it fits, else, in
    order, 64-key dQ steps, 64-row dK/dV steps, not persistent.  The fused
    kernel's entries (d64) become two kernels with their tiles (128-row
    dK/dV steps, 128-key dQ steps, the row ring, persistent; bitwise
    deterministic either way).  ``split_head_dim`` (d256) stays: it does
    not fit a bias ring beside its exchange tiles (``check_supported``
    sends it to the triton backward).  Not measured yet (issue 50), with a
    2-byte bias (``smem_bytes``): d64 193 / 195 KiB (dQ / dK/dV kernel),
    d128 177 / 162 KiB with 64-key dQ steps (the table's 128-key steps
    would need 289 KiB)."""
    fits = lambda cfg: (cfg.smem_bytes(head_dim, bias_itemsize=itemsize)
                        <= 227 * 1024)
    cfg = self
    if cfg.split_head_dim:
      return cfg
    if cfg.one_kernel:
      cfg = dataclasses.replace(cfg, fused=False, deterministic=True)
    for change in (dict(block_kv_dq=64), dict(block_q_dkv=64),
                   dict(persistent=False)):
      if fits(cfg):
        return cfg
      cfg = dataclasses.replace(cfg, **change)
    return cfg

  @classmethod
  def default(cls, head_dim: int, causal: bool, dropout: bool = False,
              alibi: bool = False, soft_cap: bool = False,
              deterministic: bool = True) -> "MosaicBackwardConfig":
    """The entry for a (padded) head dim and the call's features; the
    figures behind each rule are in docs/design.md ("The backward config
    table"; the runs named there are in the history at commit 29bf24f, and
    every run's figures in this docstring at commit b4b5b5f).

    - d64: one fused kernel (fixed-point dQ adds), 128-row query steps,
      128-key dQ steps, the row ring, persistent; with dropout two kernels
      (128-row query steps, 128-key dQ steps).
    - d > 128: ``split_head_dim`` (the only register-feasible form), the
      row ring without dropout.
    - d128, two kernels with 64-row / 64-key steps, 240 registers per dK/dV
      consumer where non-causal, and by feature: dropout 128-key dQ steps;
      ALiBi (``alibi``) Q in registers in the dQ kernel, the row ring, the
      stagger where causal; otherwise 128-key dQ steps, the row ring read
      a step ahead (``prefetch_rows``), the stagger only non-causal with a
      soft-cap (``soft_cap``, which also takes 240 registers causal).
    - ``deterministic=False`` (``flash_attention``'s flag): d64 without
      dropout adds dQ in f32 in the fused kernel; elsewhere the
      deterministic entry, which was as fast or faster.
    """
    if not deterministic:  # d64: the deterministic entry with f32 dQ
      # adds, as runs 204-205 timed it
      entry = cls.default(head_dim, causal, dropout, alibi, soft_cap)
      if dropout or head_dim > 64:
        return entry
      return dataclasses.replace(entry, fused=False, deterministic=False)
    if head_dim <= 64 and dropout:
      return cls(block_q_dkv=128, block_kv_dq=128)
    if head_dim <= 64:
      return cls(block_q_dkv=128, block_kv_dq=128, fused=True,
                 row_ring=True, persistent=True)
    if head_dim > 128:
      return cls(split_head_dim=True, row_ring=not dropout)
    wide = None if causal else 240  # dK/dV registers (runs 189-197)
    if dropout:
      return cls(block_kv_dq=128, dkdv_registers=wide)
    if alibi:  # (the stagger only where causal)
      return cls(dq_rows_in_registers=1, stagger_consumers=causal,
                 dkdv_registers=wide, row_ring=True)
    return cls(block_kv_dq=128, prefetch_rows=True, row_ring=True,
               stagger_consumers=soft_cap and not causal,
               dkdv_registers=240 if soft_cap else wide)
