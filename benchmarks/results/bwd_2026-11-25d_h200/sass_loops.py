"""The loops of a SASS listing (a branch back to an earlier label, before the function's trailing retry stubs),
each with its HGMMA (wgmma) count and its local-memory accesses (STL / LDL): which spills sit in the step loops.

  python3 sass_loops.py run217_k.sass.gz
"""
import gzip
import re
import sys

lines = gzip.open(sys.argv[1], "rt").read().splitlines()
labels = {m.group(1): i for i, l in enumerate(lines)
          if (m := re.match(r"^\.(L_x_\d+):", l.strip()))}
tail = max(i for i, l in enumerate(lines) if "EXIT" in l)  # retry stubs after
for i, l in enumerate(lines[:tail]):
  m = re.search(r"BRA\s+`\(\.(L_x_\d+)\)", l)
  if not (m and labels.get(m.group(1), i) < i):
    continue
  s = labels[m.group(1)]
  body = range(s, i + 1)
  hgmma = sum("HGMMA" in lines[j] for j in body)
  local = [lines[j].split(";")[0].split("*/")[-1].strip() for j in body
           if re.search(r"\b(STL|LDL)", lines[j])]
  print(f"loop lines {s}-{i}: {i - s} instructions, {hgmma} HGMMA, "
        f"{len(local)} local accesses: {local}")
