"""Statistical quality of the dropout keep mask (``pallas_flash/dropout.py``).

CPU only.  For ``--seeds`` seeds and each rate, one [T, S] mask of
``dropout.keep_mask`` (the definition every backend uses), and per statistic
its deviation from independent Bernoulli(1 - rate) bits in standard errors
(pooled over the seeds):

* ``mean``: the keep rate;
* ``rows`` / ``cols``: the per-row / per-column keep rates against the
  binomial (mean of z^2 against 1, standard error sqrt(2 / count));
* ``pair_row`` / ``pair_col`` / ``pair_diag``: correlation of neighbours
  (i, j) with (i + 1, j), (i, j + 1), (i + 1, j + 1);
* ``pair_half``: correlation of the two rows (i, i + 8) of a query pair,
  whose bits are the two halves of one word;
* ``rect{d}``: 4-point correlation of the corners (i, j), (i + d, j),
  (i, j + d), (i + d, j + d), the one dependency the words leave (d = 8:
  both rows of pairs).

Independent bits give values ~ N(0, 1): |x| > 3 is suspect.

  PYTHONPATH=$PWD python3 tools/dropout_stats.py [--seeds 10] [--size 8192]
"""
from __future__ import annotations

import argparse

import jax
import numpy as np

from pallas_flash import dropout

RECTS = (1, 2, 8, 64, 1000)


def seed_stats(seed, size: int, rate: float):
  """{name: (sum, count)} of the [size, size] mask of a [1, 1] seed array
  (see module doc)."""
  keep = np.asarray(dropout.keep_mask(seed, size, size, rate))[0, 0]
  p, var = 1.0 - rate, rate * (1.0 - rate)
  x = (keep.astype(np.float32) - np.float32(p)) / np.float32(np.sqrt(var))
  out = {"mean": (keep.sum() - p * keep.size, keep.size)}
  for name, axis in (("rows", 1), ("cols", 0)):
    z2 = np.square(keep.mean(axis) - p) / (var / size)
    out[name] = (float(np.sum(z2 - 1.0)), z2.size)
  for name, a, b in (("pair_row", x[1:], x[:-1]), ("pair_col", x[:, 1:], x[:, :-1]),
                     ("pair_diag", x[1:, 1:], x[:-1, :-1])):
    out[name] = (float(np.sum(a * b, dtype=np.float64)), a.size)
  first = (np.arange(size) >> 3) % 2 == 0  # row i of each pair (i, i + 8)
  first[size - 8:] = False
  a, b = x[first], x[np.flatnonzero(first) + 8]
  out["pair_half"] = (float(np.sum(a * b, dtype=np.float64)), a.size)
  for d in RECTS:
    c = x[d:, d:] * x[:-d, :-d] * x[d:, :-d] * x[:-d, d:]
    out[f"rect{d}"] = (float(np.sum(c, dtype=np.float64)), c.size)
  return out


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--seeds", type=int, default=10)
  ap.add_argument("--size", type=int, default=8192)
  ap.add_argument("--rates", default="0.1,0.5,0.9")
  args = ap.parse_args()
  print(f"{args.seeds} seeds x [{args.size}, {args.size}] masks; "
        "deviations in standard errors")
  for rate in (float(r) for r in args.rates.split(",")):
    total = {}
    for i in range(args.seeds):
      seed = dropout.seeds(jax.random.key(i), 1, 1)  # as flash_attention's
      for name, (s, n) in seed_stats(seed, args.size, rate).items():
        acc = total.setdefault(name, [0.0, 0])
        acc[0] += s
        acc[1] += n
    cells = []
    for name, (s, n) in total.items():
      if name == "mean":
        z = s / np.sqrt(rate * (1 - rate) * n)
      elif name in ("rows", "cols"):
        z = s / np.sqrt(2.0 * n)
      else:
        z = s / np.sqrt(n)
      cells.append(f"{name} {z:+.2f}")
    print(f"rate {rate}: " + "  ".join(cells), flush=True)


if __name__ == "__main__":
  main()
