"""Many hosts: the same calls as several JAX processes (docs/sharding.md).

Launches tests/multihost_worker.py as 2 processes x 2 CPU devices each,
joined by ``jax.distributed.initialize`` on a local coordinator, with
multi-process CPU collectives (Gloo).  Each worker checks batch sharding
under ``jit``, the automatic ring under ``jit`` (``context_parallel="ring"``,
and the default, which picks the ring across processes) and the zigzag
``ring_attention`` in ``shard_map``: values and gradients of its addressable
shards against the one-device call, and the compiled collectives (none for
batch sharding, collective-permutes only for the rings).
"""
from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

import cases

_WORKER = cases.ROOT / "tests" / "multihost_worker.py"
_PROCESSES = 2
_DEVICES_PER_PROCESS = 2
_TIMEOUT_S = 360  # ~1 min on 2 loaded cores; CI runs it beside other tests


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _env():
  # Not the 4 devices tests/conftest.py gives this process: each worker is a
  # host of 2 CPU devices.
  env = cases.cpu_env(_DEVICES_PER_PROCESS)
  # The interpreter's blocking callbacks need a large enough intra-op pool
  # (tests/conftest.py).
  env["NPROC"] = str(max(8, int(env.get("NPROC") or 0)))
  return env


def _output(procs, logs):
  text = []
  for i, (proc, log) in enumerate(zip(procs, logs)):
    log.seek(0)
    text.append(f"--- process {i} (exit {proc.returncode}) ---\n"
                + log.read().decode(errors="replace"))
  return "\n".join(text)


def test_two_processes_shard_batch_and_ring(tmp_path):
  port = _free_port()
  env = _env()
  logs = [open(tmp_path / f"process{i}.log", "w+b") for i in range(_PROCESSES)]
  procs = [subprocess.Popen(
      [sys.executable, str(_WORKER), "--process-id", str(i),
       "--num-processes", str(_PROCESSES), "--port", str(port)],
      stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cases.ROOT)
      for i, log in enumerate(logs)]
  try:
    # A process that fails leaves the other blocked in a collective (or in
    # initialize): stop waiting as soon as any exits non-zero.
    deadline = time.monotonic() + _TIMEOUT_S
    timed_out = True
    while time.monotonic() < deadline:
      codes = [p.poll() for p in procs]
      if all(c == 0 for c in codes) or any(c not in (None, 0) for c in codes):
        timed_out = False
        break
      time.sleep(0.5)
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
        p.wait()
  output = _output(procs, logs)
  for log in logs:
    log.close()
  if timed_out:
    pytest.fail(f"multi-process run did not finish in {_TIMEOUT_S} s:\n{output}")
  if any(p.returncode != 0 for p in procs):
    pytest.fail(f"a worker failed:\n{output}")
  for i in range(_PROCESSES):
    assert f"[process {i}] OK" in output, output
  print(output)
