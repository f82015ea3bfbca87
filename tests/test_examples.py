"""The ring example runs and agrees with the one-device call (the README
points users at it; the conftest's 4 CPU devices stand in for GPUs)."""
import importlib.util
import pathlib

import jax
import pytest

_EXAMPLE = pathlib.Path(__file__).parents[1] / "examples" / "ring_attention.py"


@pytest.mark.skipif(len(jax.devices()) < 2, reason="needs 2 devices")
def test_ring_example_runs_and_matches(capsys):
  spec = importlib.util.spec_from_file_location("ring_example", _EXAMPLE)
  example = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(example)
  assert example.main() == 0
  out = capsys.readouterr().out
  assert "collective-permute" in out and "all-gather" not in out
