"""Context parallelism: a sequence split over devices, attended as a ring
(or by Ulysses' all-to-alls).

Runs on any machine: with fewer than two accelerators it asks XLA for four
CPU devices (the kernels then run in Pallas interpret mode, so the sizes are
small).  Two ways, each checked against the one-device call:

1. ``pallas_flash.ring_attention`` inside ``jax.shard_map``, zigzag layout
   (every device gets the same causal work), causal, GQA, per-sequence key
   lengths; values and gradients (fwd + bwd as a ring).
2. Plain ``jax.jit(pallas_flash.flash_attention)`` on q / k / v sharded over
   the sequence (``P(None, "seq")``): with ``context_parallel="ring"`` a
   kernel call runs the same ring by itself, balanced (causal shares
   reordered into the zigzag layout and back inside the call, by
   collective-permutes); with the default ``context_parallel=None`` it
   picks Ulysses here (the 4 query heads split over 2 or 4 devices, one
   process: all-to-alls), else the ring.

For each, the compiled program is searched for collectives: a ring moves
K / V with collective-permutes only, Ulysses with all-to-alls (no
all-gather of the sequence).

    python examples/ring_attention.py            # exits 1 on a mismatch
"""
from __future__ import annotations

import os
import re
import sys

if "--no-fake-devices" not in sys.argv:  # before jax is imported
  os.environ.setdefault("XLA_FLAGS",
                        "--xla_force_host_platform_device_count=4")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

import pallas_flash as pf  # noqa: E402

_COLLECTIVE = re.compile(r"\b(all-gather|all-reduce|all-to-all|reduce-scatter|"
                         r"collective-permute)(-start)?\(")


def collectives(compiled) -> dict[str, int]:
  counts: dict[str, int] = {}
  for name, _ in _COLLECTIVE.findall(compiled.as_text()):
    counts[name] = counts.get(name, 0) + 1
  return counts


def rel_err(x, ref) -> float:
  x, ref = np.asarray(x, np.float32), np.asarray(ref, np.float32)
  return float(np.linalg.norm(x - ref) / np.linalg.norm(ref))


def main() -> int:
  devices = jax.devices()
  n_dev = len(devices)
  if n_dev < 2:
    print("needs two devices (run without --no-fake-devices on a CPU)")
    return 1
  on_cpu = jax.default_backend() == "cpu"
  # [B, T, N, H]: GQA 4 query heads over 2 kv heads; T = 64 per device on a
  # GPU, 8 on a CPU (interpret mode).
  b, n, kh, h = 2, 4, 2, 64
  t = n_dev * (8 if on_cpu else 1024)
  dtype = jnp.float32 if on_cpu else jnp.bfloat16
  keys = jax.random.split(jax.random.key(0), 4)
  q = jax.random.normal(keys[0], (b, t, n, h), dtype)
  k = jax.random.normal(keys[1], (b, t, kh, h), dtype)
  v = jax.random.normal(keys[2], (b, t, kh, h), dtype)
  do = jax.random.normal(keys[3], q.shape, dtype)
  kv_len = jnp.array([t, t - 5], jnp.int32)  # second sequence: a padded tail
  tol = 1e-4 if dtype == jnp.float32 else 2e-2
  mesh = jax.make_mesh((n_dev,), ("seq",), devices=devices,
                       axis_types=(jax.sharding.AxisType.Auto,))

  # The ring takes the kernels' calls; on a CPU ``implementation=None`` is
  # the XLA reference path (partitioned by XLA itself, with gathers), so
  # name the Pallas-Triton kernels there (interpret mode).
  impl = "triton" if on_cpu else None

  def one_device(q, k, v, context_parallel=None):
    return pf.flash_attention(q, k, v, is_causal=True,
                              key_value_seq_lengths=kv_len,
                              implementation=impl,
                              context_parallel=context_parallel)

  ref_out, ref_vjp = jax.vjp(one_device, q, k, v)
  ref = (ref_out, *ref_vjp(do))
  ok = True

  # 1. shard_map + ring_attention, zigzag layout.
  ring = jax.shard_map(
      lambda q, k, v, kv_len: pf.ring_attention(
          q, k, v, axis_name="seq", is_causal=True, layout="zigzag",
          key_value_seq_lengths=kv_len, implementation=impl),
      mesh=mesh, in_specs=(P(None, "seq"),) * 3 + (P(),),
      out_specs=P(None, "seq"), check_vma=False)
  zz = lambda x: pf.zigzag(x, n_dev)  # global order -> zigzag order

  def ring_fwd_bwd(q, k, v, do):
    out, vjp = jax.vjp(lambda q, k, v: ring(q, k, v, kv_len), q, k, v)
    return (out, *vjp(do))

  compiled = jax.jit(ring_fwd_bwd).lower(zz(q), zz(k), zz(v), zz(do)).compile()
  got = [pf.zigzag(x, n_dev, inverse=True)
         for x in compiled(zz(q), zz(k), zz(v), zz(do))]
  errs = [rel_err(g, r) for g, r in zip(got, ref)]
  found = collectives(compiled)
  ok &= max(errs) < tol and set(found) == {"collective-permute"}
  print(f"shard_map ring (zigzag) on {n_dev} devices: out/dq/dk/dv rel err "
        + ", ".join(f"{e:.1e}" for e in errs) + f"; collectives {found}")

  # 2. plain jit on sequence-sharded arrays: the automatic ring, and the
  # default (Ulysses where the heads split over the devices, one process).
  seq = NamedSharding(mesh, P(None, "seq"))
  qs, ks, vs, dos = (jax.device_put(x, seq) for x in (q, k, v, do))
  for context_parallel, expect in (
      ("ring", {"collective-permute"}),
      (None, {"all-to-all"} if n % n_dev == 0 and jax.process_count() == 1
       else {"collective-permute"})):

    def jit_fwd_bwd(q, k, v, do):
      out, vjp = jax.vjp(
          lambda q, k, v: one_device(q, k, v, context_parallel), q, k, v)
      return (out, *vjp(do))

    compiled = jax.jit(jit_fwd_bwd).lower(qs, ks, vs, dos).compile()
    got = compiled(qs, ks, vs, dos)
    errs = [rel_err(g, r) for g, r in zip(got, ref)]
    found = collectives(compiled)
    ok &= max(errs) < tol and set(found) == expect
    print(f"jit on P(None, 'seq') arrays, context_parallel="
          f"{context_parallel!r}: out/dq/dk/dv rel err "
          + ", ".join(f"{e:.1e}" for e in errs) + f"; collectives {found}; "
          f"output sharding {got[0].sharding.spec}")
  print("OK" if ok else "MISMATCH")
  return 0 if ok else 1


if __name__ == "__main__":
  sys.exit(main())
