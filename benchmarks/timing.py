"""How the benchmarks time and size a compiled call (shared by every script
in ``benchmarks/``).

``interleaved_samples``: warm calls timed in bursts of back-to-back calls
ending in ``jax.block_until_ready`` (long enough that dispatch overhead is
amortised), the implementations in a fresh random order each rep;
``time_interleaved`` gives the median per call, ``paired_ratio`` the
quartiles of two entries' per-rep time ratios.  ``compile_timed``: trace +
lower + compile, timed, and the trace + lower part alone.  The ``*_bytes``
helpers read ``compiled.memory_analysis()`` and the device's memory stats.
"""
from __future__ import annotations

import math
import time

import jax
import numpy as np


def time_calls(f, args, reps: int, sample_s: float):
  """Median seconds per call of compiled ``f`` (already warm) and the spread."""
  return time_interleaved({"f": (f, args)}, reps, sample_s)["f"]


def interleaved_samples(calls: dict, reps: int, sample_s: float):
  """({name: [s per call, one per rep]}, {name: calls per burst}) for warm
  ``calls`` ({name: (f, args)}).  Each rep times one burst of back-to-back
  calls of every entry, the entries in a fresh (seeded) random order each
  rep, so that neither clock or thermal drift nor the kernel that ran just
  before (its power draw, what it left in L2) falls on one entry more than
  another; the samples of one rep were taken within one pass over
  ``calls`` (``paired_ratio`` compares two entries rep by rep)."""
  bursts = {}
  for name, (f, args) in calls.items():
    single = math.inf  # fastest of 3 single calls: the first may still
    for _ in range(3):  # allocate memory or load code
      t0 = time.perf_counter()
      jax.block_until_ready(f(*args))
      single = min(single, time.perf_counter() - t0)
    bursts[name] = int(max(1, min(2000, math.ceil(sample_s / max(single, 1e-7)))))
  samples = {name: [] for name in calls}
  names = list(calls)
  rng = np.random.default_rng(0)
  for _ in range(reps):
    for i in rng.permutation(len(names)):  # (any hashable keys)
      name = names[i]
      f, args = calls[name]
      n = bursts[name]
      t0 = time.perf_counter()
      for _ in range(n):
        out = f(*args)
      jax.block_until_ready(out)
      samples[name].append((time.perf_counter() - t0) / n)
      del out
  return samples, bursts


def summarise(xs):
  """(median, spread = (max - min) / median) of one entry's samples."""
  med = float(np.median(xs))
  return med, float((np.max(xs) - np.min(xs)) / med) if med > 0 else 0.0


def time_interleaved(calls: dict, reps: int, sample_s: float):
  """{name: (median s per call, spread, calls per burst)} of
  ``interleaved_samples``."""
  samples, bursts = interleaved_samples(calls, reps, sample_s)
  return {name: (*summarise(xs), bursts[name]) for name, xs in samples.items()}


def paired_ratio(a, b):
  """Median and quartiles (q25, q50, q75) of the per-rep ratios a[r] / b[r]
  of two entries' ``interleaved_samples``: each ratio compares bursts of
  one pass, so drift slower than a pass (clocks, temperature) cancels."""
  r = np.asarray(a, np.float64) / np.asarray(b, np.float64)
  return tuple(float(x) for x in np.percentile(r, [25, 50, 75]))


def mem_bytes(compiled) -> int | None:
  try:
    m = compiled.memory_analysis()
    return int(m.argument_size_in_bytes + m.output_size_in_bytes
               + m.temp_size_in_bytes - m.alias_size_in_bytes)
  except Exception:
    return None


def temp_bytes(compiled) -> int | None:
  try:
    m = compiled.memory_analysis()
    return int(m.temp_size_in_bytes + m.output_size_in_bytes)
  except Exception:
    return None


def free_device_bytes() -> int | None:
  try:
    stats = jax.devices()[0].memory_stats()
    return int(stats["bytes_limit"] - stats["bytes_in_use"])
  except Exception:
    return None


def compile_timed(f, *args, options=None):
  """(compiled, seconds to trace + lower + compile, of them to trace +
  lower): the host's Python side against XLA's compile (for Pallas kernels
  LLVM, PTX and ptxas on a GPU)."""
  t0 = time.perf_counter()
  lowered = jax.jit(f).lower(*args)
  t_lower = time.perf_counter() - t0
  compiled = lowered.compile(options)
  return compiled, time.perf_counter() - t0, t_lower
