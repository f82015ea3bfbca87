"""The first call of a training step (the jitted fwd+bwd) in a fresh process,
with or without JAX's persistent compilation cache, one cell per process
(issue 50 item 2: "caching where JAX allows it"); ``IMPL`` (a
``benchmarks.peers.IMPLS`` name, default ours on the default dispatch)
times a peer's first call the same way.

Times trace / lower / compile / first run / a second run of the jitted
fwd+bwd (value_and_grad, random cotangent) of one benchmark cell (B x S =
16k tokens, hidden 2048, bf16, the default dispatch) after a warm-up call on a
tiny shape, with the cache in CACHE_DIR ("none": no cache), and prints one
RESULT line with a checksum of the loss and gradients (equal checksums: the
cached executable computes the same bits).  Run it twice with the same
CACHE_DIR: the first process compiles and writes the cache, the second reads
it; with a CACHE_DIR the disk tier of ``mosaic/lowering_cache.py`` is on too
(its modules in CACHE_DIR/pallas_flash_modules; ``PALLAS_FLASH_MODULE_CACHE=0``
leaves JAX's cache alone).  benchmarks/results/h200_2026-12-01_restart_cache/
has the commands of the standing record (one H200: per cell ours writing,
reading, reading with JAX's cache alone, then tokamax writing and reading).
(The 2026-11-28 record ran an earlier form of this script that closed over
the cotangent, a 64 MiB constant in each program.)

  python3 tools/cache_probe.py CELL CACHE_DIR|none [IMPL]   # CELL: d64_4k_C
"""
from __future__ import annotations

import sys
import time


def main(cell: str, cache: str, impl: str = "") -> None:
  import jax
  import jax.numpy as jnp
  if cache != "none":  # before the first compile
    jax.config.update("jax_compilation_cache_dir", cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
  import pallas_flash as pf
  # A warm-up on a tiny other shape: import and backend set-up do not count.
  x = jnp.ones((1, 128, 2, 32), jnp.bfloat16)
  jax.block_until_ready(jax.jit(lambda a: pf.flash_attention(a, a, a))(x))
  from benchmarks import peers, workloads
  d, s, c = cell.split("_")  # e.g. d64_16k_N: head dim, S, causal or not
  h, seq, causal = int(d[1:]), int(s[:-1]) * 1024, c == "C"
  # the benchmark cell: hidden 2048, B x S = 16k tokens
  w = workloads.convention(seqlens=(seq,), head_dims=(h,), causals=(causal,),
                           dtypes=("bfloat16",))[0]
  ks = jax.random.split(jax.random.key(0), 4)
  q, k, v, ct = (jax.random.normal(kk, (w.batch, seq, w.heads, h),
                                   jnp.bfloat16) for kk in ks)
  attention = lambda q, k, v: pf.flash_attention(q, k, v, is_causal=causal)
  if impl:  # a benchmark implementation's call on the same cell
    x = workloads.Inputs(q=q, k=k, v=v, do=ct)
    fn, aux = peers.IMPLS[impl].build(w, x)
    attention = lambda q, k, v: fn(q, k, v, aux)

  # The cotangent is an argument: closed over, it would be a constant of the
  # program (64 MiB in these cells), which the compile and the cache's
  # compression of the executable then pay for (the 2026-11-28 record did).
  def loss(q, k, v, ct):
    out = attention(q, k, v)
    return (out.astype(jnp.float32) * ct).sum()

  f = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))
  t0 = time.perf_counter()
  traced = f.trace(q, k, v, ct)
  t1 = time.perf_counter()
  lowered = traced.lower()
  t2 = time.perf_counter()
  compiled = lowered.compile()
  t3 = time.perf_counter()
  r = jax.block_until_ready(compiled(q, k, v, ct))
  t4 = time.perf_counter()
  jax.block_until_ready(compiled(q, k, v, ct))
  t5 = time.perf_counter()
  chk = float(r[0]) + sum(float(jnp.abs(g.astype(jnp.float32)).sum())
                          for g in r[1])
  print(f"RESULT {cell} {impl or 'ours'} "
        f"cache={'on' if cache != 'none' else 'off'} "
        f"trace {t1 - t0:.2f} lower {t2 - t1:.2f} compile {t3 - t2:.2f} "
        f"first_run {t4 - t3:.2f} second_run {t5 - t4:.3f} "
        f"total {t4 - t0:.2f} chk {chk:.6e}", flush=True)


if __name__ == "__main__":
  main(*sys.argv[1:4])
