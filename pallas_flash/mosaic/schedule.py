"""Static schedule of the persistent Mosaic GPU kernels.

``MosaicConfig.persistent`` (the forward) and
``MosaicBackwardConfig.persistent`` (the dK/dV kernel) launch one CTA per
SM (FA3, Shah et al. 2024, Sec. 3.1, persistent kernel).  Which CTA runs
which work item (forward: a q tile of one (batch, head), ``pipeline.Item``;
dK/dV: a kv tile of one (batch, kv head)) is decided here, at trace time,
by list scheduling: the items, taken in the launch order, each go to the
CTA with the least work so far (with the items sorted longest first this is
Graham's LPT rule).  Each CTA runs its items in the order they were given
to it (``Items``), so CTAs work on neighbouring items of the launch order
at the same time, and a launch order that keeps a few heads together keeps
their K/V (forward) or Q/dO (dK/dV) in L2.

An item's work is its number of steps with full lengths (``tile_steps``:
the ``pallas_flash.masks`` bounds of the kernel's tile table) plus a fixed
cost.  Per-batch lengths, segment ids and dense masks are only known at run
time; they change the balance, never the result.
"""
from __future__ import annotations

import heapq
import operator

from jax import lax
import jax.numpy as jnp
import numpy as np

from pallas_flash import masks

# Work of an item beyond its steps, in steps: its row tiles' load, the
# epilogue's stores.
ITEM_COST = 1.0


def tile_steps(spec: masks.MaskSpec, t: int, s: int, rows: int, block: int,
               num_tiles: int, kv_major: bool = False) -> np.ndarray:
  """[num_tiles] steps of each work item of ``rows`` rows when q_len = t and
  kv_len = s (positional masks only): the kv tiles of ``block`` keys that a
  q tile visits, or with ``kv_major`` (the dK/dV kernel's items) the q tiles
  of ``block`` queries that a kv tile visits (``masks.item_bounds``, as
  ``forward.tile_table``).  In numpy: with jnp each of its ops would be
  compiled and run eagerly on the device at trace time (0.2-0.9 s per new
  shape on a CPU)."""
  q_len, kv_len = np.array([t], np.int64), np.array([s], np.int64)
  offset = masks.diagonal_offset(spec, q_len, kv_len, xp=np)
  start = np.arange(num_tiles, dtype=np.int64)[None, :] * rows
  bounds = masks.item_bounds(spec, start, rows, q_len[:, None],
                             kv_len[:, None], offset[:, None], kv_major, np)
  first, last, _, _ = masks.tile_range(*bounds, block, np)
  steps = np.asarray(last - first, np.int64)  # [1, 1] without causal
  return np.broadcast_to(steps, (1, num_tiles))[0]


# A step a consumer spends idle (``forward``'s idle consumers: its turns and
# slot releases, no GEMM, no softmax), in steps of work: the consumers share
# the tensor cores and the SM's issue slots, yet an idle one still waits on
# the others' turns.  0.5 from the one measurement: skipping 8.3% of the
# consumer-steps of fp8 d128 S4k C took ~4% off the time (0.87 -> 0.90-0.91
# of cuDNN fp8, H200, 2026-11-30).  In the model the longest-first deal
# stays within 2-3% of the mean for a true cost anywhere in 0.15-0.8; the
# launch-order deal by q-tile steps left 7-11% in all of them.
IDLE_STEP = 0.5


def consumer_steps(spec: masks.MaskSpec, t: int, s: int, block_q: int,
                   consumers: int, block: int, num_tiles: int) -> np.ndarray:
  """[num_tiles] work of each forward item of ``consumers`` x ``block_q``
  rows whose consumers skip the steps they have nothing in (three
  consumers: rows past T, causal tiles past a consumer's own diagonal):
  the mean over its consumers of their own steps (``tile_steps`` of
  ``block_q``-row items), an idle step at ``IDLE_STEP``.  The consumers
  share the tensor cores in turns, so a CTA with one busy consumer of
  three runs about three times as fast as a full one."""
  item = tile_steps(spec, t, s, consumers * block_q, block, num_tiles)
  own = tile_steps(spec, t, s, block_q, block, num_tiles * consumers)
  own = np.where(np.arange(num_tiles * consumers) * block_q < t, own, 0)
  own = own.reshape(num_tiles, consumers)
  busy = own.sum(axis=1)
  return (busy + IDLE_STEP * (consumers * item - busy)) / consumers


def launch_order(b: int, n: int, num_q_tiles: int, heads_inner: bool,
                 heads_per_group: int):
  """The work items' launch order, ((axis name, size), ...) with the last
  axis varying fastest (Mosaic GPU maps the last grid axis to blockIdx.x):
  batch rows fastest, then (``heads_inner``) the heads of one q tile, q tiles
  slowest, or else the q tiles of one head, heads slowest.  With
  ``heads_per_group`` < n (persistent, heads_inner) the heads go in groups of
  that many, q tiles slowest within a group."""
  if not heads_inner:
    return (("heads", n), ("q_tiles", num_q_tiles), ("batch", b))
  if heads_per_group < n:
    return (("head_groups", n // heads_per_group), ("q_tiles", num_q_tiles),
            ("heads", heads_per_group), ("batch", b))
  return (("q_tiles", num_q_tiles), ("heads", n), ("batch", b))


def heads_per_group(n: int, kv_bytes_per_head: int, group_mib: float) -> int:
  """The most heads, a divisor of n and at least 1, whose K/V take at most
  ``group_mib`` MiB (MosaicConfig.head_group_mib)."""
  most = max(1, int(group_mib * 2**20 // kv_bytes_per_head))
  return max(d for d in range(1, n + 1) if n % d == 0 and d <= most)


def decode(index, order, rem=operator.mod, div=operator.floordiv):
  """Launch-order item index -> {axis name: coordinate}.  numpy by default;
  the kernel passes ``lax.rem`` / ``lax.div``."""
  coords = {}
  for name, size in reversed(order):  # the last axis varies fastest
    coords[name] = rem(index, size)
    index = div(index, size)
  return coords


def item_of(coords, order, num_q_tiles: int, longest_first: bool):
  """(batch row, head, q tile) of the item at launch-order ``coords`` (numpy
  or traced): with ``longest_first`` (causal: the last query tiles see the
  most keys) the q tiles count down."""
  qt = coords["q_tiles"]
  n = coords["heads"]
  if "head_groups" in coords:
    n = n + coords["head_groups"] * dict(order)["heads"]
  if longest_first:
    qt = num_q_tiles - 1 - qt
  return coords["batch"], n, qt


class Items:
  """A kernel CTA's work items, in the launch ``order`` ((axis name, size),
  the last axis fastest): without a schedule, the one item of the CTA's grid
  coordinates (a grid of ``order``); with one (persistent: a grid of one
  "cta" axis), the items of the CTA's row of the ``list_schedule`` table
  ``sched_ref``, in its order."""

  def __init__(self, order, sched_ref=None):
    self.order, self.sched_ref = order, sched_ref
    self.count = 1  # the CTA's items
    if sched_ref is not None:
      self.cta = lax.axis_index("cta")
      self.count = sched_ref[self.cta, 0]

  def coords(self, i):
    """{axis name: coordinate} of the CTA's item i."""
    if self.sched_ref is None:
      return {name: lax.axis_index(name) for name, _ in self.order}
    return decode(self.sched_ref[self.cta, 1 + i], self.order, lax.rem,
                  lax.div)

  def run(self, body):
    """body(item index, ring steps before it) -> ring steps after it, over
    the CTA's items in order (step g of the CTA's whole sequence uses ring
    slot g % num_stages); returns the CTA's ring steps."""
    if self.sched_ref is None:
      # A Python 0: a jnp constant closed over by the step loops would
      # reach the Mosaic GPU loop lowering as a literal operand, which it
      # rejects.
      return body(0, 0)
    return lax.fori_loop(0, self.count, body, jnp.int32(0))


def list_schedule(work: np.ndarray, num_ctas: int,
                  longest_first: bool = False) -> np.ndarray:
  """[num_ctas, 1 + most items] int32: column 0 a CTA's item count, then its
  items (indices into ``work``) in the order it runs them, -1 after.  Item i
  goes to the CTA with the least work so far, ties to the lowest CTA.
  ``longest_first``: the items are dealt in decreasing work (Graham's LPT
  rule proper; ties in launch order) and each CTA runs its own in launch
  order (so CTAs still move through head groups together).  Without it
  they are dealt in launch order, which the causal launch order makes
  longest first when an item's work follows its q tile (two consumers);
  with three, whose last tile's idle consumers make it short, the busiest
  CTA of fp8 d128 S4k causal (B4 x 16 heads, one head a group) in the model
  of ``consumer_steps`` has 8.7% more than the mean dealt in launch order
  by q-tile steps, 0.5% dealt longest first by ``consumer_steps`` (S16k:
  7.8% -> 0.4%).  Measured (H200, 2026-11-30, ``mosaic_bench``, the
  persistent form / cuDNN fp8): 0.83 dealt the old way, 0.91 this way,
  level with the non-persistent default's 0.91."""
  if (work == work[0]).all():  # equal items go round robin: i to i % C
    items = [list(range(c, len(work), num_ctas)) for c in range(num_ctas)]
  else:
    heap = [(0.0, c) for c in range(num_ctas)]
    items = [[] for _ in range(num_ctas)]
    deal = (np.argsort(-work, kind="stable") if longest_first
            else np.arange(len(work)))
    for i in deal.tolist():
      load, c = heapq.heappop(heap)
      items[c].append(i)
      heapq.heappush(heap, (load + float(work[i]) + ITEM_COST, c))
    if longest_first:
      items = [sorted(x) for x in items]
  width = 1 + max(len(x) for x in items)
  table = np.full((num_ctas, width), -1, np.int32)
  for c, x in enumerate(items):
    table[c, 0] = len(x)
    table[c, 1:1 + len(x)] = x
  return table
