import os
import sys

sys.path.insert(0, os.path.dirname(__file__))  # tests/cases.py

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


ON_GPU = jax.default_backend() == "gpu"


def pytest_collection_modifyitems(config, items):
  """Marks the Mosaic GPU kernel runs that go through Pallas's interpreter
  (CPU only) as ``mgpu_interpret``: ``.ci/test`` runs them in their own
  process with a hang guard (see docs/mosaic.md, "Interpret mode on a CPU")."""
  if ON_GPU:
    return
  for item in items:
    params = getattr(item, "callspec", None)
    uses_mosaic = (item.path.name == "test_mosaic.py"
                   or (params is not None and params.params.get("impl") == "mosaic"))
    if uses_mosaic:
      item.add_marker(pytest.mark.mgpu_interpret)
