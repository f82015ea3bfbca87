"""Features in random combinations (GPU only; .ci/gpu runs it).

The curated cases (cases.py and the test files) take each mask and score
feature alone or in chosen pairs.  Here a seeded generator draws calls of
the default dispatch with shapes and features at random: head dims 32-256
(40, 80, 96, 160, 192 too), T and S from 1 to 1100 (odd, one off a tile,
T != S), GQA / MQA, both causal alignments, windows, lengths (empty rows
too), segment ids, soft-caps, dense masks (a row masked entirely too),
ALiBi, dropout, a bias of any broadcast pattern with its gradient,
``deterministic=False``, and fp8 forwards.  Each is checked against the
float32 reference: the output and every gradient under one random cotangent
(``cases.check_gradients``), or for fp8 the output and LSE on the
dequantized values (``test_fp8.check_fp8``).

``PALLAS_FLASH_FUZZ_CASES`` (default 32) draws more; the draws depend only
on the case index, so a failure's id reproduces it:
``pytest tests/test_fuzz.py -k c017``.
"""
from __future__ import annotations

import os
import random

import jax
import pytest

from cases import Case, bias_of, check_gradients
from test_fp8 import check_fp8

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    jax.default_backend() != "gpu",
    reason="random sizes up to 1100 x 1100: too slow for interpret mode")]

SEED = 20261202
COUNT = int(os.environ.get("PALLAS_FLASH_FUZZ_CASES", "32"))

# A row that sees a single key has dS = 0 exactly; its gradients are the
# rounding noise of delta - dP (``check_gradients``' floor).  H200,
# 2026-12-02, 160 draws: such noise read up to 0.045 of 0.05 x the largest
# gradient (c156, c158: one key a row, dropout's 1 / (1 - r) on O's bf16
# rounding), every other gradient within TOL of its own size.
FLOOR = 0.1


def draw(i: int):
  """(Case, bias broadcast pattern or None, descale shape or None = not
  fp8) of case ``i``."""
  rng = random.Random(SEED * 1000 + i)
  p = lambda x: rng.random() < x
  h = rng.choice([32, 40, 64, 64, 80, 96, 128, 128, 160, 192, 256])
  n = rng.choice([1, 2, 4, 8])
  t = rng.choice([1, 7, 63, 64, 65, 127, 128, 200, 257, 384, 511, 700, 1024,
                  1100])
  s = t if p(0.5) else rng.choice([1, 9, 64, 129, 300, 513, 1000, 1300])
  b = rng.choice([1, 2, 3])
  o = dict(b=b, t=t, s=s, n=n, k=rng.choice([d for d in (1, 2, 4, 8)
                                             if n % d == 0]),
           h=h, causal=p(0.5), dtype=rng.choice(["bfloat16", "bfloat16",
                                                 "float16"]))
  if o["causal"] and p(0.5):
    o["bottom_right"] = True
  if p(0.2):
    o["window"] = (rng.choice([0, 3, 50, 300]), rng.choice([0, 5, 100]))
  if p(0.25):
    o["q_lengths"] = tuple(rng.randint(0, t) for _ in range(b))
    o["kv_lengths"] = tuple(rng.randint(0, s) for _ in range(b))
  if p(0.15) and t == s:
    o["segments"] = True
  if p(0.15):
    o["soft_cap"] = rng.choice([5.0, 30.0])
  if p(0.12):
    o["dense_mask"] = (rng.choice(["full", "keys", "heads", "full_empty_row"])
                       if t > 3 else "keys")
  fp8 = rng.choice(["", "BK", "B1"]) if p(0.15) else None
  if fp8 is None:  # (the fp8 kernel takes none of these)
    if p(0.2):
      o["alibi"] = True
    if p(0.2):
      o["dropout"] = rng.choice([0.1, 0.3])
    if p(0.1):
      o["deterministic"] = False
  bias = rng.choice(["heads", "batch_plane", "full", "plane"]) if (
      fp8 is None and p(0.15)) else None  # (``cases.bias_of``'s patterns)
  if fp8 is not None:
    o["dtype"] = "float8_e4m3fn"
  flags = [k for k in ("causal", "bottom_right", "segments", "alibi")
           if o.get(k)] + [f"{k}={o[k]}" for k in (
               "window", "soft_cap", "dense_mask", "dropout") if k in o]
  flags += ["lengths"] * ("q_lengths" in o) + [f"bias={bias}"] * bool(bias)
  flags += ["nondeterministic"] * ("deterministic" in o)
  flags += [f"descale{fp8 or '1'}"] * (fp8 is not None)
  name = (f"c{i:03d} {o['dtype']} d{h} B{b} T{t} S{s} N{n}/{o['k']} "
          + " ".join(flags))
  return Case(name, **o), bias, fp8


@pytest.mark.parametrize("i", range(COUNT), ids=lambda i: draw(i)[0].name)
def test_random_call_matches_reference(i):
  case, bias, fp8 = draw(i)
  if fp8 is not None:
    check_fp8(case, None, shape=fp8, seed=i)
    return
  arg = None if bias is None else bias_of(case, bias, seed=i, scale=0.5)
  check_gradients(case, None, seed=i, bias=arg, floor=FLOOR)
