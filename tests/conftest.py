import os
import sys

sys.path.insert(0, os.path.dirname(__file__))  # tests/cases.py

# Pallas's Mosaic GPU interpreter runs each warpgroup as a nested XLA CPU
# execution whose io_callbacks (mbarrier waits) block; XLA's CPU thunk executor
# hands ready thunks, callbacks included, to the CPU client's intra-op Eigen
# pool, whose size defaults to the number of usable cores.  With 2 cores, two
# blocked callbacks (the thread_map callback and one warpgroup's barrier wait)
# fill the pool and the warpgroup that would release them never runs: a
# deadlock.  XLA sizes that pool from $NPROC when set (DefaultThreadPoolSize);
# 8 threads cover the kernel's 3 warpgroups + the outer callback with margin
# (NPROC=1: every run hangs; the default 2 on this box: ~60%).
# Must be set before the CPU client starts (jax.default_backend() below).
if int(os.environ.get("NPROC") or 0) < 8:
  os.environ["NPROC"] = str(max(8, os.cpu_count() or 1))

# tests/test_sharding.py partitions over 4 CPU devices; the other tests use
# device 0.  Like NPROC, this must be set before the CPU client starts.
_DEVICES_FLAG = "--xla_force_host_platform_device_count"
if _DEVICES_FLAG not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = " ".join(
      filter(None, [os.environ.get("XLA_FLAGS"), f"{_DEVICES_FLAG}=4"]))

import jax
import pytest

# Pallas's Mosaic GPU interpreter runs the kernel's threads inside a host
# callback that dispatches JAX ops itself; with the CPU client's async dispatch
# the test's next ops can queue ahead of those nested ops and deadlock (seen on
# 2 cores, in test_mosaic.py::test_deterministic).  Synchronous CPU dispatch
# removes that ordering hazard; it must be set before the CPU client starts.
jax.config.update("jax_cpu_enable_async_dispatch", False)


@pytest.fixture(autouse=True)
def _exact_f32_matmuls():
  """Peers such as jax.nn use the default matmul precision (TF32 on GPUs);
  comparisons at f32 tolerances need true f32 on every side."""
  with jax.default_matmul_precision("highest"):
    yield


@pytest.fixture(autouse=True)
def _fresh_jits():
  """tests/cases.py's jitted checks live for one test (a later test may
  patch what they trace)."""
  import cases
  cases.JITTED.clear()
  yield
  cases.JITTED.clear()


ON_GPU = jax.default_backend() == "gpu"


# Each test's seconds in the last .ci/gpu run (one H200, 16 workers): the
# PF_TEST_TIMES file of that run ("seconds outcome nodeid" lines).  On a GPU
# the tests are ordered for pytest-xdist from these (``xdist_order``).  A
# test not listed counts as long.
_GPU_TIMES = os.path.join(os.path.dirname(__file__), "gpu_times.txt")
_NEW_TEST_SECONDS = 30.0


class _CopySlices:
  """The Mosaic GPU kernels' shared <-> global memory copies, recorded while
  a test lowers them (``whole_copy_slices``)."""

  def __init__(self):
    self.copies = []  # (direction, shared-memory ref, global-memory ref)

  def unclipped(self) -> list[str]:
    """Copies whose shared-memory side is not swizzled and whose global
    slice may run past its array: natively Mosaic GPU issues a contiguous
    unswizzled copy as a plain bulk copy bounded only by the whole array's
    end (jax 0.11.2, ``launch_context.async_copy``), not per dimension as
    TMA tensor maps (tiled, swizzled copies) and interpret mode do; a slice
    that overhangs its dimension then reads or writes the next rows (a
    forward whose LSE had T rows wrote another head's, 2026-11-29).  Such a
    copy must cover whole slices: each sliced dimension a multiple of the
    slice, static starts on slice boundaries (dynamic ones are tile
    indices times the slice)."""
    from jax._src.state import indexing
    bad = []
    for direction, smem, gmem in self.copies:
      if any(type(t).__name__ == "UnswizzleRef"
             for t in getattr(smem, "transforms", ())):
        continue  # a TMA tensor-map copy: each dimension clipped
      for t in getattr(gmem, "transforms", ()):
        if not isinstance(t, indexing.NDIndexer):
          continue
        for d, idx in enumerate(t.indices):
          if isinstance(idx, indexing.Slice) and (
              t.shape[d] % idx.size
              or (isinstance(idx.start, int) and idx.start % idx.size)):
            bad.append(f"{direction}: dim {d} of {t.shape}, slices of "
                       f"{idx.size} from {idx.start}")
    return sorted(set(bad))


@pytest.fixture
def whole_copy_slices(monkeypatch):
  """Records the Mosaic GPU copies (``plgpu.copy_smem_to_gmem`` /
  ``copy_gmem_to_smem``) of what the test lowers; ``.unclipped()`` lists
  those that could run past their arrays natively, which interpret mode
  cannot show."""
  from jax.experimental.pallas import mosaic_gpu as plgpu
  rec = _CopySlices()
  for name, direction in (("copy_smem_to_gmem", "store"),
                          ("copy_gmem_to_smem", "load")):
    real = getattr(plgpu, name)

    def recorded(src, dst, *args, _real=real, _dir=direction, **kwargs):
      rec.copies.append((_dir, *((src, dst) if _dir == "store"
                                 else (dst, src))))
      return _real(src, dst, *args, **kwargs)
    monkeypatch.setattr(plgpu, name, recorded)
  return rec


def xdist_order(seconds: list[float], workers: int) -> list[int]:
  """An order of tests (indices into ``seconds``) for ``workers`` xdist
  workers: longest first, dealt into the contiguous blocks that xdist's
  worksteal scheduler hands out at the start (block i takes len(rest) //
  (workers - i) of the rest), each test to the block with the fewest seconds
  so far that has room, each block longest first.  Sorted longest first
  without the dealing, the first block (worksteal) or the first chunk of 11
  (xdist's default "load") held the longest tests, which one worker then
  ran one after another (the replay of both schedulers and the native
  times: docs/design.md, "Native suites")."""
  n = len(seconds)
  workers = max(1, min(workers, n))
  sizes, rest = [], n
  for i in range(workers):
    sizes.append(rest // (workers - i))
    rest -= sizes[-1]
  blocks = [[] for _ in range(workers)]
  load = [0.0] * workers
  for i in sorted(range(n), key=lambda i: -seconds[i]):  # (stable)
    j = min((j for j in range(workers) if len(blocks[j]) < sizes[j]),
            key=lambda j: (load[j], j))
    blocks[j].append(i)
    load[j] += seconds[i]
  return [i for block in blocks for i in block]


def _gpu_seconds() -> dict[str, float]:
  if not os.path.exists(_GPU_TIMES):
    return {}
  with open(_GPU_TIMES) as f:
    rows = [line.rstrip("\n").split(None, 2) for line in f if line.strip()]
  return {nodeid: float(seconds) for seconds, _, nodeid in rows}


def order_for_xdist(items) -> None:
  """items reordered in place by ``xdist_order`` from ``_GPU_TIMES``, for
  $PYTEST_XDIST_WORKER_COUNT workers (xdist sets it in each worker; 1
  without xdist: longest first)."""
  seconds = _gpu_seconds()
  workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
  order = xdist_order([seconds.get(item.nodeid, _NEW_TEST_SECONDS)
                       for item in items], workers)
  items[:] = [items[i] for i in order]


@pytest.hookimpl(hookwrapper=True)
def pytest_collection_modifyitems(config, items):
  """Marks the Mosaic GPU kernel runs that go through Pallas's interpreter
  (CPU only) as ``mgpu_interpret``, so ``-m mgpu_interpret`` selects them
  (see docs/design.md, "Interpret mode on a CPU"); before -m / -k deselect.
  On a GPU, after them, orders what is left for xdist's workers
  (``order_for_xdist``: the blocks must be cut from the final list)."""
  if not ON_GPU:
    for item in items:
      params = getattr(item, "callspec", None)
      uses_mosaic = (item.path.name == "test_mosaic.py"
                     or (params is not None
                         and params.params.get("impl") == "mosaic"))
      if uses_mosaic:
        item.add_marker(pytest.mark.mgpu_interpret)
  yield
  if ON_GPU:
    order_for_xdist(items)


_TIMES = os.environ.get("PF_TEST_TIMES")  # .ci/gpu: one line per test


def pytest_runtest_logreport(report):
  if getattr(report, "node", None) is not None:
    return  # pytest-xdist's controller, echoing a worker's report
  if _TIMES and (report.when == "call" or report.failed
                 or (report.when == "setup" and report.skipped)):
    with open(_TIMES, "a") as f:
      f.write(f"{report.duration:7.1f} {report.outcome:7} {report.nodeid}\n")
