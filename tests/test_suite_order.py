"""The GPU suite's test order for pytest-xdist (``conftest.xdist_order``)."""
import numpy as np
import pytest

from conftest import xdist_order


def _blocks(order, n, workers):
  """order cut where worksteal's initial split cuts it."""
  out, rest, start = [], n, 0
  for i in range(workers):
    size = rest // (workers - i)
    out.append(order[start:start + size])
    start, rest = start + size, rest - size
  return out


@pytest.mark.parametrize("n, workers", [(749, 16), (100, 7), (5, 8), (1, 1),
                                        (40, 1)])
def test_order_is_a_balanced_dealing(n, workers):
  rng = np.random.default_rng(n + workers)
  seconds = list(rng.pareto(1.5, n) * 5.0)  # a few long tests, many short
  order = xdist_order(seconds, workers)
  assert sorted(order) == list(range(n))  # a permutation
  blocks = _blocks(order, n, min(workers, n))
  for block in blocks:  # each block longest first
    assert all(seconds[a] >= seconds[b] for a, b in zip(block, block[1:]))
  loads = [sum(seconds[i] for i in block) for block in blocks]
  # greedy dealing: no block exceeds another by more than the longest test
  assert max(loads) - min(loads) <= max(seconds) + 1e-9
  if workers == 1:
    assert order == sorted(range(n), key=lambda i: -seconds[i])


def test_the_longest_tests_go_to_different_workers():
  seconds = [84.0, 67.0, 64.0, 60.0] + [1.0] * 60
  blocks = _blocks(xdist_order(seconds, 16), 64, 16)
  heads = [block[0] for block in blocks[:4]]
  assert sorted(heads) == [0, 1, 2, 3]


def test_the_gpu_hook_reorders_after_deselection(monkeypatch):
  """The GPU side of the collection hook (not otherwise run on a CPU):
  after the other hooks (-m / -k deselection) the items are reordered as
  xdist_order says, from the times file, unlisted tests at 30 s."""
  import types
  import conftest
  times = conftest._gpu_seconds()
  listed = sorted(times, key=times.get)[:40]  # 40 listed tests, shortest
  names = listed + ["tests/new.py::test_not_in_the_file"]
  items = [types.SimpleNamespace(nodeid=name) for name in names]
  monkeypatch.setattr(conftest, "ON_GPU", True)
  monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "4")
  hook = conftest.pytest_collection_modifyitems(None, items)
  next(hook)  # the other hooks run here
  del items[3]  # (a deselected test)
  names = [item.nodeid for item in items]
  with pytest.raises(StopIteration):
    hook.send(None)
  seconds = [times.get(name, conftest._NEW_TEST_SECONDS) for name in names]
  assert [item.nodeid for item in items] == [
      names[i] for i in xdist_order(seconds, 4)]
  assert items[0].nodeid == "tests/new.py::test_not_in_the_file"  # 30 s
