"""One process of the multi-host test (tests/test_multihost.py).

Run one per "host"; on a CPU each process asks XLA for its host devices
(``XLA_FLAGS=--xla_force_host_platform_device_count=2``) and the processes
exchange data through JAX's multi-process CPU collectives (Gloo, the default
of ``jax_cpu_collectives_implementation``):

    XLA_FLAGS=--xla_force_host_platform_device_count=2 JAX_PLATFORMS=cpu \\
      python tests/multihost_worker.py --process-id 0 --num-processes 2 --port 12345 &
    XLA_FLAGS=--xla_force_host_platform_device_count=2 JAX_PLATFORMS=cpu \\
      python tests/multihost_worker.py --process-id 1 --num-processes 2 --port 12345

Every process builds the same seeded inputs (numpy), computes the one-device
reference (forward and the gradients of sum(out * ct)) on its own first
device, builds global arrays over a mesh of all processes' devices with
``jax.make_array_from_callback`` and checks its addressable shards of:

1. batch sharding: ``jit(flash_attention)`` fwd + bwd on q / k / v sharded
   over the batch (``P("x")``); no collective in the compiled program;
2. the automatic ring: the same ``jit`` with ``context_parallel="ring"`` on
   arrays sharded over the sequence (``P(None, "x")``); collective-permutes
   only;
3. the default (``context_parallel=None``) on the same arrays: the ring
   across processes (``ulysses.chosen``; in one process these 4 heads over
   4 devices would run Ulysses); collective-permutes only;
4. ``ring_attention(layout="zigzag")`` in ``shard_map`` on zigzag-ordered
   arrays; collective-permutes only.

Exits non-zero (an AssertionError) on a mismatch.  On a CPU the kernels run
as ``implementation="triton"`` in Pallas interpret mode (the default CPU
path is the XLA reference, which XLA partitions by itself).
"""
from __future__ import annotations

import argparse
import functools
import os
import re
import sys
import time
import traceback

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import pallas_flash as pf

# Tiny shapes: the kernels run in Pallas interpret mode on shared CPU cores.
# GQA (4 query heads over 2 kv heads); T = 32 gives 8 rows per device on a
# 4-device ring and 4-row chunks in the zigzag layout.
B, T, N, K, H = 4, 32, 4, 2, 32
IMPL = "triton"
_COLLECTIVES = re.compile(
    r"all-gather|all-reduce|collective-permute|all-to-all|reduce-scatter")


def _log(msg):
  print(f"[process {jax.process_index()}] {msg}", flush=True)


def _inputs():
  """The same arrays in every process (numpy, seeded)."""
  rng = np.random.default_rng(0)
  normal = lambda *shape: rng.standard_normal(shape, np.float32)
  q, k, v = normal(B, T, N, H), normal(B, T, K, H), normal(B, T, K, H)
  ct = normal(B, T, N, H)
  kv_len = np.array([T, T - 5, 17, T], np.int32)  # padded tails
  return (q, k, v), kv_len, ct


def _attention(qkv, kv_len, context_parallel=None):
  return pf.flash_attention(*qkv, is_causal=True, key_value_seq_lengths=kv_len,
                            implementation=IMPL,
                            context_parallel=context_parallel)


def _fwd_bwd(qkv, kv_len, ct, context_parallel=None):
  out, vjp = jax.vjp(
      lambda qkv: _attention(qkv, kv_len, context_parallel), qkv)
  return out, vjp(ct)[0]


def _reference(qkv, kv_len, ct):
  """The one-device call on this process's first device, as numpy."""
  local = jax.local_devices()[0]
  args = jax.device_put((qkv, kv_len, ct), local)
  out, grads = jax.jit(_fwd_bwd)(*args)
  return [np.asarray(x) for x in (out, *grads)]


def _global(x, sharding):
  """A global array from the full numpy array every process holds; each
  process supplies only its addressable shards."""
  return jax.make_array_from_callback(x.shape, sharding, lambda idx: x[idx])


def _collectives(compiled):
  return sorted(set(_COLLECTIVES.findall(compiled.as_text())))


def _check(name, got, want, spec, atol):
  """got: global arrays (out, dq, dk, dv); want: the full reference."""
  worst = 0.0
  for label, g, w in zip(("out", "dq", "dk", "dv"), got, want):
    assert g.sharding.is_equivalent_to(
        NamedSharding(g.sharding.mesh, spec), g.ndim), (name, label, g.sharding)
    shards = g.addressable_shards
    assert len(shards) == jax.local_device_count(), (name, label, len(shards))
    for shard in shards:
      got_shard = np.asarray(shard.data)
      want_shard = w[shard.index]
      np.testing.assert_allclose(
          got_shard, want_shard, rtol=0, atol=atol,
          err_msg=f"{name}: {label} shard {shard.index} on {shard.device}")
      worst = max(worst, float(np.max(np.abs(got_shard - want_shard))))
  return worst


def _compile_and_check(name, fwd_bwd, args, want, spec, *, expect, atol):
  """Compiles jit(fwd_bwd) for the global ``args``, checks its collectives
  against ``expect`` and its (out, dq, dk, dv) shards against ``want``."""
  t0 = time.perf_counter()
  compiled = jax.jit(fwd_bwd).lower(*args).compile()
  found = _collectives(compiled)
  out, grads = compiled(*args)
  err = _check(name, (out, *grads), want, spec, atol)
  _log(f"{name}: max |err| {err:.1e}; collectives {found}; "
       f"{time.perf_counter() - t0:.1f} s")
  assert found == expect, f"{name}: compiled collectives {found}, want {expect}"


def _run_jit(name, mesh, spec, qkv, kv_len, ct, want, *, expect, atol,
             context_parallel=None):
  """jit(flash_attention) fwd + bwd on inputs sharded as ``spec``."""
  sharding = NamedSharding(mesh, spec)
  len_spec = P(spec[0]) if spec and spec[0] is not None else P()
  args = (tuple(_global(x, sharding) for x in qkv),
          _global(kv_len, NamedSharding(mesh, len_spec)),
          _global(ct, sharding))
  fwd_bwd = functools.partial(_fwd_bwd, context_parallel=context_parallel)
  _compile_and_check(name, fwd_bwd, args, want, spec, expect=expect,
                     atol=atol)


def _run_zigzag(mesh, qkv, kv_len, ct, want, *, atol):
  """ring_attention(layout="zigzag") in shard_map, fwd + bwd."""
  p = mesh.shape["x"]
  zz = lambda x: np.asarray(pf.zigzag(jnp.asarray(x), p))
  spec = P(None, "x")
  sharding = NamedSharding(mesh, spec)
  ring = jax.shard_map(
      lambda q, k, v, kv_len: pf.ring_attention(
          q, k, v, axis_name="x", is_causal=True, layout="zigzag",
          key_value_seq_lengths=kv_len, implementation=IMPL),
      mesh=mesh, in_specs=(spec,) * 3 + (P(),), out_specs=spec,
      check_vma=False)

  def fwd_bwd(qkv, kv_len, ct):
    out, vjp = jax.vjp(lambda qkv: ring(*qkv, kv_len), qkv)
    return out, vjp(ct)[0]

  args = (tuple(_global(zz(x), sharding) for x in qkv),
          _global(kv_len, NamedSharding(mesh, P())),
          _global(zz(ct), sharding))
  _compile_and_check("shard_map zigzag ring", fwd_bwd, args,
                     [zz(w) for w in want], spec,
                     expect=["collective-permute"], atol=atol)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--process-id", type=int, required=True)
  parser.add_argument("--num-processes", type=int, default=2)
  parser.add_argument("--port", type=int, required=True)
  parser.add_argument("--coordinator-host", default="127.0.0.1")
  args = parser.parse_args(argv)

  t0 = time.perf_counter()
  # CPU: Gloo collectives between the processes (JAX 0.11's default; named
  # here so that a change of default cannot silently drop them).
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  # As tests/conftest.py: synchronous CPU dispatch for the interpreter.
  jax.config.update("jax_cpu_enable_async_dispatch", False)
  jax.distributed.initialize(f"{args.coordinator_host}:{args.port}",
                             num_processes=args.num_processes,
                             process_id=args.process_id)
  devices = jax.devices()
  _log(f"{jax.process_count()} processes, local devices "
       f"{jax.local_devices()}, global {devices}")
  assert jax.process_count() == args.num_processes
  assert len(devices) > jax.local_device_count() > 0
  mesh = jax.make_mesh((len(devices),), ("x",), devices=devices,
                       axis_types=(AxisType.Auto,))

  try:
    with jax.default_matmul_precision("highest"):
      _run_all(mesh, t0)
  except BaseException:  # noqa: BLE001
    # Exit now: a normal exit would wait in jax.distributed's shutdown
    # barrier for the other process, which waits in a collective for this
    # one (minutes, until the heartbeat timeout).
    traceback.print_exc()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)
  _log(f"OK in {time.perf_counter() - t0:.1f} s")
  jax.distributed.shutdown()
  return 0


def _run_all(mesh, t0):
  qkv, kv_len, ct = _inputs()
  want = _reference(qkv, kv_len, ct)
  _log(f"one-device reference: {time.perf_counter() - t0:.1f} s")
  # Batch sharding: every shard runs the kernel on its own rows, the same
  # computation as the reference's rows (test_sharding.py's tolerance).
  _run_jit("batch sharding (jit, P('x'))", mesh, P("x"), qkv, kv_len, ct,
           want, expect=[], atol=1e-6)
  # The rings merge blocks through their log-sum-exps: f32 rounding.
  for context_parallel in ("ring", None):
    _run_jit(f"context_parallel={context_parallel!r} (jit, P(None, 'x'))",
             mesh, P(None, "x"), qkv, kv_len, ct, want,
             expect=["collective-permute"], atol=2e-5,
             context_parallel=context_parallel)
  _run_zigzag(mesh, qkv, kv_len, ct, want, atol=2e-5)


if __name__ == "__main__":
  sys.exit(main())
