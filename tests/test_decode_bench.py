"""The decode benchmark's device-time mode (``decode_bench.in_jit``): R calls
in one jitted loop, each on the previous call's output, none hoisted."""
import argparse
import re
import time

import jax
import numpy as np
import pytest

from benchmarks import decode_bench as db


def _tiny_sets(copies=2, s=256):
  q, k, v, lens = db.cell_inputs(1, 1, s, False)
  return [(q, k, v, lens)] + [
      (q, k + i, v - i, lens) for i in range(1, copies)]  # distinct caches


def test_in_jit_is_the_chain_of_single_calls():
  """The loop computes call_R(... call_1(q)) with call j on arg set j % 2:
  the same as R separately jitted calls chained on the host, not one call
  (nothing hoisted or merged), and its HLO is one while loop of R / 2
  iterations whose body holds both calls' dots (QK^T and PV each)."""
  fn, _ = db.builders(1)["xla"](*_tiny_sets(1)[0])
  sets = _tiny_sets(2)
  g, gargs, calls = db.in_jit(fn, sets, steps=5, unroll=2)
  assert calls == 6  # rounded up to whole iterations of 2 calls
  compiled = g.lower(*gargs).compile()
  out = np.asarray(compiled(*gargs), np.float32)

  f = jax.jit(fn)
  q = sets[0][0]
  chain = []
  for j in range(calls):
    q = f(q, *sets[j % 2][1:])
    chain.append(np.asarray(q, np.float32))
  # Bit-equal on the CPU; two bf16 ulps of slack for a GPU's fusions.
  np.testing.assert_allclose(out, chain[-1], rtol=0, atol=2e-2)
  # Not what a loop that skipped calls or hoisted them would give: one call,
  # or every call on the first query (the last on arg set 1).
  hoisted = np.asarray(f(sets[0][0], *sets[1][1:]), np.float32)
  for wrong in (chain[0], hoisted):
    assert np.abs(out - wrong).max() > 0.1

  hlo = compiled.as_text()
  loops = db.hlo_while_loops(hlo)
  if loops or jax.default_backend() == "cpu":
    (loop,) = loops
    trip, ops = loop
    assert trip == calls // 2
    assert ops["dot"] + ops["custom-call"] >= 4  # 2 calls x (QK^T, PV) per iteration
  else:  # a GPU compiler may unroll a 3-trip loop: then every call is inline
    assert len(re.findall(r"\s(?:dot|custom-call)\(", hlo)) >= 2 * calls


def test_in_jit_rejects_an_output_not_shaped_like_q():
  q, k, v, lens = _tiny_sets(1)[0]
  g, gargs, _ = db.in_jit(lambda q, k, v, lens: q[:, :, :8], [(q, k, v, lens)], 2)
  try:
    g(*gargs)
  except ValueError as e:
    assert "shaped like q" in str(e)
  else:
    raise AssertionError("no ValueError")


def _args(device_time):
  return argparse.Namespace(reps=2, small_reps=2, sample_s=0.002,
                            device_time=device_time, jit_sample_s=1e-3,
                            jit_max_steps=4, jit_unroll=2)


def test_bench_cell_reports_per_call_and_in_jit(monkeypatch):
  monkeypatch.setattr(db, "L2_BYTES", 2 * 256 * db.K * db.H * 2 * 2)  # 2 copies
  rows = db.bench_cell("1:1:256", 1, 1, 256, False, ["xla", "jax-gqa"],
                       _args(True), time.time() + 300, None)
  xla = next(r for r in rows if r["impl"] == "xla")
  assert xla["status"] == "ok" and xla["copies"] == 2 and xla["rel_err"] < 2e-2
  assert xla["med_s"] > 0 and xla["jit_s"] > 0 and xla["jit_finite"]
  assert xla["jit_calls"] == 4
  if jax.default_backend() == "cpu":
    (loop,) = xla["jit_loops"]
    assert loop["trip_count"] == 2
    assert loop["body_ops"]["dot"] + loop["body_ops"]["custom-call"] >= 4
  gqa = next(r for r in rows if r["impl"] == "jax-gqa")
  if jax.default_backend() != "gpu":
    assert gqa["status"].startswith("did not run")
  md = db.table(rows, 1.0)
  assert "TB/s from the in-jit time" in md
  assert f"| 1:1:256 | per call | — | — | — | {xla['med_s'] * 1e6:.1f} |" in md
  assert f"| 1:1:256 | in-jit | — | — | — | {xla['jit_s'] * 1e6:.1f} |" in md

  rows = db.bench_cell("1:1:256", 1, 1, 256, False, ["xla"], _args(False),
                       time.time() + 300, None)
  assert "jit_s" not in rows[0] and rows[0]["med_s"] > 0
  md = db.table(rows, 1.0)
  assert "TB/s from the per-call time" in md and "in-jit |" not in md


def test_sweep_cell_times_variants_against_peers(monkeypatch, tmp_path):
  """``decode_sweep.sweep_cell``: each variant checked against the reference,
  compiled as an in-jit loop and timed with the peers; ratios to the best
  peer; the HLO of the first variant's and first peer's loops written for
  the cells asked."""
  from tools import decode_sweep as ds
  monkeypatch.setattr(db, "L2_BYTES", 1)  # one copy
  monkeypatch.setitem(ds.PLAN, "1:1:64", (
      [ds.DecodeConfig(block_k=16, num_splits=2)], ["xla", "cudnn"]))
  args = argparse.Namespace(reps=2, small_reps=2, sample_s=0.002,
                            jit_sample_s=1e-3, jit_max_steps=2, jit_unroll=2,
                            hlo_cells="1:1:64")
  rows = ds.sweep_cell("1:1:64", 1, 1, 64, False, args, time.time() + 300,
                       None, str(tmp_path))
  assert [r["name"] for r in rows] == ["xla", "cudnn", "block_k=16,num_splits=2"]
  ok = [r for r in rows if r.get("status") == "ok"]
  if jax.default_backend() != "gpu":
    assert rows[1]["status"].startswith("did not run")  # no cuDNN on a CPU
    assert len(ok) == 2 and rows[0]["vs_best_peer"] == 1.0
  for r in ok:
    assert r["rel_err"] < 2e-2 and r["jit_calls"] == 2 and r["jit_finite"]
  assert rows[2]["config"]["num_splits"] == 2
  assert rows[2]["vs_best_peer"] == pytest.approx(
      min(r["jit_s"] for r in ok[:-1]) / rows[2]["jit_s"])
  for name in ("hlo_ours_1_1_64.txt", "hlo_xla_1_1_64.txt"):
    assert "HloModule" in (tmp_path / name).read_text()
  md = ds.table(rows)
  assert f"| 1:1:64 | block_k=16,num_splits=2 | 2 | {rows[2]['jit_s'] * 1e6:.1f} |" in md
