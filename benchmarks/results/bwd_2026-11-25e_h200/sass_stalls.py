"""Summarise Nsight Compute source-page CSVs (``ncu -i REP --page source
--csv --print-source sass``): per kernel, the warp stall samples by SASS
opcode and the instructions with the most samples.

  python3 sass_stalls.py run223_dkdv_sass.csv.gz ...
"""
import collections
import csv
import gzip
import io
import sys


def rows(path):
  raw = gzip.open(path, "rt") if path.endswith(".gz") else open(path)
  text = raw.read()
  lines = text.splitlines()  # a "Kernel Name" line, then the table
  start = next(i for i, l in enumerate(lines) if l.startswith('"Address"'))
  return list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))


for path in sys.argv[1:]:
  table = rows(path)
  if not table:
    print(path, "empty"); continue
  cols = list(table[0])
  src = "Source"
  samp = next((c for c in cols if "Warp Stall Sampling (All" in c), None)
  nots = next((c for c in cols if "Warp Stall Sampling (Not" in c), None)
  if samp is None:
    print(path, "columns:", cols[:30]); continue
  num = lambda r, c: float((r.get(c) or "0").replace(",", "") or 0)
  total = sum(num(r, samp) for r in table) or 1.0
  by_op = collections.Counter()
  for r in table:
    words = r[src].split() or ["?"]
    op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    by_op[op.split(".")[0]] += num(r, samp)
  print(f"== {path}: {len(table)} instructions, {total:.0f} samples")
  print("  by opcode: " + ", ".join(f"{op} {100 * s / total:.1f}%"
                                    for op, s in by_op.most_common(14)))
  top = sorted(table, key=lambda r: -num(r, samp))[:25]
  for r in top:
    print(f"  {100 * num(r, samp) / total:5.1f}% "
          f"(not issued {100 * num(r, nots) / total if nots else 0:5.1f}%) "
          f"{r.get('Address', r.get('#', ''))[:8]:>8} {r[src].strip()[:90]}")
