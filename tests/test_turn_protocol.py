"""A model check of the forward's turn protocol (``pipeline.Sync``,
``forward._attention_kernel``'s ``in_turns``) under every interleaving.

The consumers take turns on the tensor cores through named barriers: consumer
w's turn barrier is arrived on (``bar.arrive``) by consumer w - 1 and synced
on (``bar.sync``) by w, 2 x 128 threads.  A named barrier completes when that
many threads arrived, whoever they are, so a consumer that arrives twice
before the owner syncs completes it alone: the owner then waits a round late
and the turns are lost.  Interpret mode runs the protocol on mbarriers and
cannot show this (a three-consumer persistent kernel without the end-of-item
exchange passed its interpret tests, 2026-11-30), so this models the per-consumer sequence of passes and
takes and searches all interleavings for a barrier completed without its
owner, or a deadlock.

Per item of ``steps`` steps, consumer w of C: a take first unless w = 0, then
per step a pass (S GEMM issued) and a take (before P V), then a pass unless
w is the last; in a persistent kernel (several items) the item ends with one
more pass by the last consumer and a take by consumer 0 (``exchange``).
Two and three consumers alike (three in a persistent kernel since this
exchange covers them).
"""
from __future__ import annotations

import functools

import pytest


def ops(w: int, c: int, items: list[int], exchange: bool,
        overlap: bool = False):
  """Consumer w's sequence: ("pass", barrier) / ("take", barrier)."""
  if overlap:
    return overlap_ops(w, c, items)
  seq = []
  for steps in items:
    if w != 0:
      seq.append(("take", w))
    for _ in range(steps):
      seq += [("pass", (w + 1) % c), ("take", w)]
    if w != c - 1:
      seq.append(("pass", (w + 1) % c))
    if exchange and len(items) > 1:
      if w == c - 1:
        seq.append(("pass", 0))
      if w == 0:
        seq.append(("take", 0))
  return tuple(seq)


def overlap_ops(w: int, c: int, items: list[int]):
  """``overlapped``'s sequence (softmax overlap): per item with steps, the
  last consumer passes first; each step a take (S(j) and P(j-1) V(j-1)
  issued together) then a pass; then the last P V's take and, but for the
  last consumer, a pass.  No exchange: each item starts with consumer 0
  waiting for the last one's start-of-item pass."""
  seq = []
  for steps in items:
    if steps == 0:
      continue
    if w == c - 1:
      seq.append(("pass", 0))
    for _ in range(steps):
      seq += [("take", w), ("pass", (w + 1) % c)]
    seq.append(("take", w))
    if w != c - 1:
      seq.append(("pass", (w + 1) % c))
  return tuple(seq)


def check(c: int, items: list[int], exchange: bool,
          overlap: bool = False) -> str | None:
  """None if every interleaving completes with each barrier's generations
  made of one pass and one take; else what went wrong."""
  seqs = [ops(w, c, items, exchange, overlap) for w in range(c)]

  # state: per consumer (position, waiting-on generation or -1); per
  # barrier (arrivals in the open generation as (passes, takes), generation)
  @functools.lru_cache(maxsize=None)
  def explore(pos, waiting, bars):
    if all(p == len(s) for p, s in zip(pos, seqs)) and all(
        g == -1 for g in waiting):
      return None
    moved = False
    for w in range(c):
      if waiting[w] != -1:  # blocked in a bar.sync until its generation ends
        b = seqs[w][pos[w] - 1][1]
        if bars[b][2] > waiting[w]:
          nw = list(waiting); nw[w] = -1
          err = explore(pos, tuple(nw), bars)
          if err:
            return err
          moved = True
        continue
      if pos[w] == len(seqs[w]):
        continue
      kind, b = seqs[w][pos[w]]
      passes, takes, gen = bars[b]
      passes, takes = passes + (kind == "pass"), takes + (kind == "take")
      nb = list(bars)
      nw = list(waiting)
      if passes + takes == 2:  # 2 x 128 threads: the generation completes
        if passes == 2:
          return f"barrier {b} completed by two passes (c={c}, {items})"
        nb[b] = (0, 0, gen + 1)
      else:
        nb[b] = (passes, takes, gen)
      if kind == "take":
        nw[w] = gen  # released once generation gen has completed
      np_ = list(pos); np_[w] += 1
      err = explore(tuple(np_), tuple(nw), tuple(nb))
      if err:
        return err
      moved = True
    if not moved:
      return f"deadlock at {pos} (c={c}, {items})"
    return None

  return explore(tuple([0] * c), tuple([-1] * c), tuple([(0, 0, 0)] * c))


ITEMS = [[1], [2], [0], [1, 1], [2, 1], [1, 0, 2], [0, 1], [3, 1, 1]]
CASES = [(c, items) for c in (2, 3) for items in ITEMS]


@pytest.mark.parametrize("c, items", CASES, ids=str)
def test_turns_never_lap_with_the_exchange(c, items):
  assert check(c, items, exchange=True) is None


@pytest.mark.parametrize("c", [2, 3])
def test_without_the_exchange_a_persistent_kernel_laps(c):
  """The model finds the hazard: a consumer's next item's first pass lands
  on a barrier whose owner has not taken this item's last one."""
  assert check(c, [1], exchange=False) is None  # one item: no hazard
  err = check(c, [1, 1], exchange=False)
  assert err is not None and "two passes" in err


@pytest.mark.parametrize("c, items", CASES, ids=str)
def test_overlapped_turns_never_lap(c, items):
  assert check(c, items, exchange=False, overlap=True) is None
