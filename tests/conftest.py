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
# PF_TEST_TIMES file of that run ("seconds outcome nodeid" lines).  The GPU
# run starts the longest tests first, so that no worker ends on a long
# compile that started late.  A test not listed counts as long.
_GPU_TIMES = os.path.join(os.path.dirname(__file__), "gpu_times.txt")
_NEW_TEST_SECONDS = 30.0


def _gpu_seconds() -> dict[str, float]:
  if not os.path.exists(_GPU_TIMES):
    return {}
  with open(_GPU_TIMES) as f:
    rows = [line.rstrip("\n").split(None, 2) for line in f if line.strip()]
  return {nodeid: float(seconds) for seconds, _, nodeid in rows}


def pytest_collection_modifyitems(config, items):
  """Marks the Mosaic GPU kernel runs that go through Pallas's interpreter
  (CPU only) as ``mgpu_interpret``, so ``-m mgpu_interpret`` selects them
  (see docs/design.md, "Interpret mode on a CPU").  On a GPU, orders the
  tests longest first (``_GPU_TIMES``)."""
  if ON_GPU:
    seconds = _gpu_seconds()
    items.sort(key=lambda item: -seconds.get(item.nodeid, _NEW_TEST_SECONDS))
    return
  for item in items:
    params = getattr(item, "callspec", None)
    uses_mosaic = (item.path.name == "test_mosaic.py"
                   or (params is not None and params.params.get("impl") == "mosaic"))
    if uses_mosaic:
      item.add_marker(pytest.mark.mgpu_interpret)


_TIMES = os.environ.get("PF_TEST_TIMES")  # .ci/gpu: one line per test


def pytest_runtest_logreport(report):
  if getattr(report, "node", None) is not None:
    return  # pytest-xdist's controller, echoing a worker's report
  if _TIMES and (report.when == "call" or report.failed):
    with open(_TIMES, "a") as f:
      f.write(f"{report.duration:7.1f} {report.outcome:7} {report.nodeid}\n")
