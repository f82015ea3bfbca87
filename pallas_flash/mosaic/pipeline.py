"""The warp-specialised pipeline of the Mosaic GPU kernels (forward and
backward): named barriers and the consumers' turns (``Sync``), a work item's
tile bounds and visiting order (``Item``, ``run_steps``), and the producer's
TMA loop over K / V tiles (``load_kv_tiles``).

FA3 (Shah et al. 2024), Sec. 3.1: one producer warpgroup fills a
``num_stages``-deep shared-memory ring by TMA; C consumer warpgroups read it,
release each slot when done, and take turns on the tensor cores in a ring
(ping-pong scheduling).  ``forward.py`` and ``backward.py`` build their kernels
from these pieces; what joins a score tile (masks, ALiBi, dropout, a bias) is
in ``score_tiles.py``.
"""
from __future__ import annotations

import functools

import jax
from jax import lax
import jax.experimental.pallas as pl
import jax.experimental.pallas.mosaic_gpu as plgpu
from jax.experimental.mosaic.gpu import utils as mgpu_utils
import jax.numpy as jnp

WGMMA = plgpu.Layout.WGMMA
ROW = plgpu.Layout.WGMMA.reduce(1)  # one value per query row
COL = plgpu.Layout.WGMMA.reduce(0)  # one value per key column
# A step's phases are named (jax.named_scope): no instruction changes, but
# ``tools.kernel_profile`` turns each into cycles per warpgroup (Mosaic GPU's
# profiler records a clock at every named region's entry and exit).
phase = jax.named_scope
WG_THREADS = 128
# Named barrier ids: 0 is __syncthreads; 1 + warpgroup index is Mosaic GPU's
# per-warpgroup barrier (``plgpu.commit_smem``), 1..3 for the consumers.  With
# three consumers the producer's (warpgroup 3) would be BAR_TURN, so the
# producers must never commit shared memory (they issue TMA loads and wait on
# mbarriers only).
BAR_TURN = 4  # 4 .. 4 + consumers - 1: each consumer's turn
# Then the "consumed" barriers of the K slots and of the V slots; 16 named
# barriers per CTA bound MosaicConfig.num_stages.
# Registers per thread (setmaxnreg; 64K per SM, FA3's split): consumers, then
# the producer, by the number of consumer warpgroups.
REGISTERS = {2: (232, 40), 3: (160, 32)}


def named_barrier(operation: str, barrier_id, num_threads: int):
  """PTX ``bar.{arrive,sync} id, num_threads`` (a CTA's 16 named barriers)."""
  if isinstance(barrier_id, int):
    @plgpu.inline_mgpu()
    def bar_op(_):
      mgpu_utils.inline_ptx(f"bar.{operation} {barrier_id}, {num_threads};",
                            convergent=True)
    bar_op()
  else:
    @plgpu.inline_mgpu(arg_types=(plgpu.Layout.WG_SPLAT,))
    def bar_op(_, bid):
      mgpu_utils.inline_ptx(f"bar.{operation} $0, {num_threads};",
                            bid.registers[()], convergent=True)
    bar_op(barrier_id.astype(jnp.int32))


class Sync:
  """The consumers' release of ring slots and the turns on the tensor cores,
  which go round the consumers in a ring (0, 1, .., C - 1, 0, ..).

  GPU: named barriers.  A release is ``bar.arrive`` by every consumer and
  ``bar.sync`` by the producer (C + 1 warpgroups' threads); a consumer's turn
  barrier is arrived on by the previous consumer and synced on by its owner
  (2 warpgroups).  Interpret mode: one mbarrier per named barrier, same
  protocol.
  """

  def __init__(self, wg, consumers: int, num_stages: int, mbarriers):
    self.wg, self.consumers, self.num_stages = wg, consumers, num_stages
    self.mbarriers = mbarriers

  def _free(self, kind: int, slot):
    return BAR_TURN + self.consumers + kind * self.num_stages + slot

  def release(self, kind: int, slot):  # consumer: K (kind 0) / V (1) slot read
    if self.mbarriers is None:
      named_barrier("arrive", self._free(kind, slot),
                    (self.consumers + 1) * WG_THREADS)
    else:
      plgpu.barrier_arrive(self.mbarriers[kind].at[slot])

  def await_release(self, kind: int, slot):  # producer
    if self.mbarriers is None:
      named_barrier("sync", self._free(kind, slot),
                    (self.consumers + 1) * WG_THREADS)
    else:
      plgpu.barrier_wait(self.mbarriers[kind].at[slot])

  def pass_turn(self):  # consumer: the next consumer may use the tensor cores
    nxt = lax.rem(self.wg + 1, self.consumers)
    if self.mbarriers is None:
      named_barrier("arrive", BAR_TURN + nxt, 2 * WG_THREADS)
    else:
      plgpu.barrier_arrive(self.mbarriers[2].at[nxt])

  def take_turn(self):  # consumer: wait until the previous one passed it
    if self.mbarriers is None:
      named_barrier("sync", BAR_TURN + self.wg, 2 * WG_THREADS)
    else:
      plgpu.barrier_wait(self.mbarriers[2].at[self.wg])

  def consumers_meet(self):
    """Every consumer waits for all the others (the backward's epilogue with
    split_head_dim, which overwrites the row tile they share; the backward
    takes no turns, so it uses consumer 0's turn barrier)."""
    if self.mbarriers is None:
      named_barrier("sync", BAR_TURN, self.consumers * WG_THREADS)
    else:
      plgpu.barrier_arrive(self.mbarriers[3])
      plgpu.barrier_wait(self.mbarriers[3])


class Item:
  """One work item: rows [qt * C * block_q, (qt + 1) * C * block_q) of head
  n of batch row b, with its kv tile bounds and lengths (``tile_table``).

  Visiting order (producer and consumers agree on it): with ``masked_first``
  the edge tiles that need a mask (leading, then trailing), then the full
  tiles; else ascending kv order (leading masked, full, trailing masked).
  """

  def __init__(self, b, n, qt, tiles_ref, masked_first: bool, lengths: bool):
    self.b, self.n, self.qt = b, n, qt
    self.first, self.full_first, self.full_last, self.last = (
        tiles_ref[b, qt, i] for i in range(4))
    if lengths:  # the consumers' masks and epilogue; not the producer
      self.q_len, self.kv_len, self.offset = (
          tiles_ref[b, qt, i] for i in range(4, 7))
    self.masked_first = masked_first
    self.n_lead = self.full_first - self.first
    self.n_masked = self.n_lead + (self.last - self.full_last)
    self.n_full_end = self.full_last - self.first  # ascending: end of full
    self.n_steps = self.last - self.first

  def tile_of(self, j):
    """The kv tile visited at step j."""
    if not self.masked_first:
      return self.first + j
    return jnp.where(
        j < self.n_lead, self.first + j,
        jnp.where(j < self.n_masked, self.full_last + (j - self.n_lead),
                  self.full_first + (j - self.n_masked)))


def run_steps(item: Item, step, carry, alibi_tiles=None, idle=None):
  """The item's steps in its visiting order (``Item``): masked edge tiles
  and plain full tiles, ``step(j, carry, masked=...)``.

  ``idle`` (last_tile, idle_step): the trailing masked tiles past kv tile
  ``last_tile`` (one consumer's causal bound) run ``idle_step(j, carry)``
  instead (in ascending order they are the trailing steps' last ones).

  ``alibi_tiles`` (non-causal ALiBi, ``alibi_split``): (t_a, t_b, side_a,
  side_b): plain tiles below t_a lie on side side_a of the diagonal, those
  from t_b on side side_b, those between straddle it; each of the three
  runs its own loop and ``step`` gets ``side=`` (side_a, 0, side_b; None on
  masked steps), so a loop's tiles need no per-tile branch on their side."""
  masked_step = functools.partial(step, masked=True)
  plain_step = functools.partial(step, masked=False)
  if alibi_tiles is not None:
    masked_step = functools.partial(masked_step, side=None)
  if item.masked_first:  # plain steps [lo, hi) visit full_first.. in order
    lo, hi = item.n_masked, item.n_steps
    before, after = [(0, lo, masked_step)], []
    trailing = (item.n_lead, lo, item.full_last)  # steps, their first tile
  else:
    lo, hi = item.n_lead, item.n_full_end
    before, after = [(0, lo, masked_step)], [(hi, item.n_steps, masked_step)]
    trailing = (hi, item.n_steps, item.full_last)
  if idle is not None:  # split the trailing masked steps at the bound
    last_tile, idle_step = idle
    a, b, tile0 = trailing
    k = jnp.clip(a + last_tile + 1 - tile0, a, b)
    if item.masked_first:  # [0, a) and [a, k) are one masked loop
      before = [(0, k, masked_step), (k, b, idle_step)]
    else:
      after = [(a, k, masked_step), (k, b, idle_step)]
  plain = [(lo, hi, plain_step)]
  if alibi_tiles is not None:
    t_a, t_b, side_a, side_b = alibi_tiles
    j_a = jnp.minimum(jnp.maximum(lo + t_a - item.full_first, lo), hi)
    j_b = jnp.minimum(jnp.maximum(lo + t_b - item.full_first, j_a), hi)
    plain = [(lo, j_a, functools.partial(plain_step, side=side_a)),
             (j_a, j_b, functools.partial(plain_step, side=0)),
             (j_b, hi, functools.partial(plain_step, side=side_b))]
  for a, b, body in before + plain + after:
    carry = lax.fori_loop(a, b, body, carry)
  return carry


def load_kv_tiles(item: Item, group: int, block_kv: int, num_stages: int,
                  sync: Sync, kv_refs, kv_smems, kv_bars, g0=None,
                  keys=None, v_transposed: bool = False, bias=None,
                  bias_kind: int = 1):
  """The producer's loop over an item's steps: TMA copies of the K and V
  tiles of step j into ring slot (g0 + j) % num_stages, each slot refilled
  once the consumers released what it held num_stages steps before (the
  forward and the dQ kernel).  ``g0``: ring steps before this item (None:
  the item is the CTA's only one).  ``keys``: (kind, column-key ref [Sp],
  smem [num_stages, block_kv], barriers): the step's dropout column keys,
  copied with the K (kind 0) or V (1) tile whose release frees them.
  ``v_transposed``: kv_refs[1] is V^T [B, K, H, S] (the fp8 forward), its
  tiles [H, block_kv].  ``bias``: a ``BiasRing``, whose tile of the step
  is copied with V (released with it), or with K (``bias_kind`` 0: the
  consumers have read it by K's release)."""
  kv_head = lax.div(item.n, jnp.array(group, item.n.dtype))

  @pl.loop(0, item.n_steps)
  def _(j):
    g = j if g0 is None else g0 + j
    slot = lax.rem(g, num_stages)
    rows = (item.b, pl.ds(item.tile_of(j) * block_kv, block_kv), kv_head)
    refill = g >= num_stages  # the slot held step g - num_stages
    for kind, (ref, smems, bars) in enumerate(zip(kv_refs, kv_smems,
                                                  kv_bars)):
      pl.when(refill)(lambda: sync.await_release(kind, slot))
      src = ref.at[rows]
      if kind == 1 and v_transposed:
        src = ref.at[item.b, kv_head, :, rows[1]]
      plgpu.copy_gmem_to_smem(src, smems.at[slot], bars.at[slot])
      if keys is not None and keys[0] == kind:
        _, col_ref, key_smem, key_bars = keys
        plgpu.copy_gmem_to_smem(col_ref.at[rows[1]], key_smem.at[slot],
                                key_bars.at[slot])
      if bias is not None and kind == bias_kind:
        bias.copy(item, item.tile_of(j), slot)
