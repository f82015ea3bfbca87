"""The persistent Mosaic forward's trace-time schedule (CPU only, no kernel)."""
from __future__ import annotations

import numpy as np

from pallas_flash import masks
from pallas_flash.mosaic import schedule


def _causal_work(b, n, t, rows=128, bk=128, groups=1):
  """Launch-order work of a causal cell: groups of heads, q tiles longest
  first, then the group's heads, then batch (forward's persistent order)."""
  qt = t // rows
  order = schedule.launch_order(b, n, qt, True, n // groups)
  coords = schedule.decode(np.arange(b * n * qt), order)
  _, _, q = schedule.item_of(coords, order, qt, longest_first=True)
  spec = masks.MaskSpec(is_causal=True)
  return schedule.tile_steps(spec, t, t, rows, bk, qt)[q]


def test_tile_steps_follow_the_mask():
  causal = masks.MaskSpec(is_causal=True)
  np.testing.assert_array_equal(
      schedule.tile_steps(causal, 512, 512, 128, 128, 4), [1, 2, 3, 4])
  # Bottom-right alignment: 200 queries see the last 200 of 1000 keys.
  br = masks.MaskSpec(is_causal=True, bottom_right=True)
  np.testing.assert_array_equal(
      schedule.tile_steps(br, 200, 1000, 128, 128, 2), [8, 8])
  window = masks.MaskSpec(is_causal=True, window=(128, 0))
  np.testing.assert_array_equal(
      schedule.tile_steps(window, 512, 512, 128, 128, 4), [1, 2, 2, 2])
  plain = masks.MaskSpec()
  np.testing.assert_array_equal(
      schedule.tile_steps(plain, 300, 333, 128, 64, 3), [6, 6, 6])
  # kv-major (the dK/dV kernel's items): q tiles of 64 rows per kv tile.
  np.testing.assert_array_equal(
      schedule.tile_steps(causal, 512, 512, 128, 64, 4, kv_major=True),
      [8, 6, 4, 2])
  np.testing.assert_array_equal(
      schedule.tile_steps(br, 200, 1000, 256, 64, 4, kv_major=True),
      [4, 4, 4, 4])
  np.testing.assert_array_equal(
      schedule.tile_steps(window, 512, 512, 128, 128, 4, kv_major=True),
      [2, 2, 2, 1])
  np.testing.assert_array_equal(
      schedule.tile_steps(plain, 300, 333, 64, 128, 6, kv_major=True),
      [3] * 6)


def test_list_schedule_runs_every_item_once_in_launch_order():
  work = _causal_work(b=3, n=6, t=1024, groups=3)
  table = schedule.list_schedule(work, 7)
  counts, items = table[:, 0], table[:, 1:]
  assert counts.sum() == len(work)
  listed = np.concatenate([row[:c] for row, c in zip(items, counts)])
  np.testing.assert_array_equal(np.sort(listed), np.arange(len(work)))
  for row, c in zip(items, counts):
    assert (row[c:] == -1).all()
    assert (np.diff(row[:c]) > 0).all()  # each CTA runs its items in order


def test_list_schedule_balances_causal_items_within_head_groups():
  # d128 S4k causal on 132 SMs: 2048 items of 1-32 kv tiles, K/V in groups
  # of 1 and 4 heads: every CTA within 2% of the mean.  (Dealing the same
  # order in rounds left one CTA 1.3-1.6x the mean.)
  for groups in (16, 4):
    work = _causal_work(b=4, n=16, t=4096, groups=groups)
    table = schedule.list_schedule(work, 132)
    loads = np.array([(work[row[1:1 + row[0]]] + schedule.ITEM_COST).sum()
                      for row in table])
    assert loads.max() / loads.mean() < 1.02, (groups, loads.max() / loads.mean())


def test_list_schedule_equal_items_go_round_robin():
  table = schedule.list_schedule(np.full(10, 3), 4)
  np.testing.assert_array_equal(table[:, 0], [3, 3, 2, 2])
  np.testing.assert_array_equal(table[0, 1:], [0, 4, 8])
  np.testing.assert_array_equal(table[3, 1:], [3, 7, -1])
  # The same as list scheduling them one by one (ties to the lowest CTA).
  nearly = np.full(10, 3.0)
  nearly[-1] += 1e-9
  np.testing.assert_array_equal(schedule.list_schedule(nearly, 4), table)


def test_heads_per_group_is_a_divisor_within_the_budget():
  mib = 2**20
  assert schedule.heads_per_group(14, mib, 2.5) == 2  # 3 fit, 2 divides 14
  assert schedule.heads_per_group(16, 8 * mib, 4) == 1  # one head over budget
  assert schedule.heads_per_group(32, mib // 4, 4) == 16
  assert schedule.launch_order(2, 14, 5, True, 2) == (
      ("head_groups", 7), ("q_tiles", 5), ("heads", 2), ("batch", 2))
  assert schedule.launch_order(2, 14, 5, True, 14)[0] == ("q_tiles", 5)


def test_consumer_steps_count_each_consumers_own_steps():
  # Three consumers of 64 rows, 128-key tiles, causal T = S = 4096: the
  # first tile's consumers see 1, 1 and 2 kv tiles of its 2; the last tile
  # (rows 4032-4223) has one consumer with rows, its two idle ones run the
  # 32 steps at IDLE_STEP.
  causal = masks.MaskSpec(is_causal=True)
  work = schedule.consumer_steps(causal, 4096, 4096, 64, 3, 128, 22)
  idle = schedule.IDLE_STEP
  np.testing.assert_allclose(work[0], (1 + 1 + 2 + idle * 2) / 3)
  np.testing.assert_allclose(work[-1], (32 + idle * 64) / 3)
  np.testing.assert_allclose(work[-2], (31 + 31 + 32 + idle * 2) / 3)
  plain = masks.MaskSpec()
  work = schedule.consumer_steps(plain, 4096, 4096, 64, 3, 128, 22)
  np.testing.assert_allclose(work[:-1], 32)
  np.testing.assert_allclose(work[-1], (32 + idle * 64) / 3)


def test_list_schedule_longest_first_balances_three_consumer_items():
  # fp8 d128 S4k causal with three persistent consumers: 1408 items, the
  # last q tile of each head short (two idle consumers).  Dealt in launch
  # order by q-tile steps (the two-consumer deal) the busiest CTA has 8.7%
  # more than the mean; dealt longest first by ``consumer_steps``, 0.5%;
  # every item once, each CTA's items in launch order.
  causal = masks.MaskSpec(is_causal=True)
  order = schedule.launch_order(4, 16, 22, True, 1)
  _, _, q = schedule.item_of(schedule.decode(np.arange(4 * 16 * 22), order),
                             order, 22, longest_first=True)
  work = schedule.consumer_steps(causal, 4096, 4096, 64, 3, 128, 22)[q]
  steps = schedule.tile_steps(causal, 4096, 4096, 192, 128, 22)[q]
  ratio = {}
  for lpt in (False, True):
    table = schedule.list_schedule(work if lpt else steps, 132,
                                   longest_first=lpt)
    loads = np.array([(work[row[1:1 + row[0]]] + schedule.ITEM_COST).sum()
                      for row in table])
    ratio[lpt] = loads.max() / loads.mean()
    counts, items = table[:, 0], table[:, 1:]
    listed = np.concatenate([row[:c] for row, c in zip(items, counts)])
    np.testing.assert_array_equal(np.sort(listed), np.arange(len(work)))
    for row, c in zip(items, counts):
      assert (np.diff(row[:c]) > 0).all()
  assert ratio[True] < 1.01 < 1.08 < ratio[False], ratio
