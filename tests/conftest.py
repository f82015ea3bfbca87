import os
import sys

sys.path.insert(0, os.path.dirname(__file__))  # tests/cases.py

import jax
import pytest


@pytest.fixture(autouse=True)
def _exact_f32_matmuls():
  """Peers such as jax.nn use the default matmul precision (TF32 on GPUs);
  comparisons at f32 tolerances need true f32 on every side."""
  with jax.default_matmul_precision("highest"):
    yield
