"""The synchronisation of each step loop of a SASS listing: its HGMMAs (wgmma), wgmma waits (WARPGROUP.DEPBAR),
mbarrier waits (SYNCS), named barriers (BAR), exp2 (MUFU.EX2, counted in runs), TMA stores, in order.

  python3 sass_sync.py k.sass.gz
"""
import gzip
import re
import sys

lines = gzip.open(sys.argv[1], "rt").read().splitlines()
labels = {m.group(1): i for i, l in enumerate(lines)
          if (m := re.match(r"^\.(L_x_\d+):", l.strip()))}
tail = max(i for i, l in enumerate(lines) if "EXIT" in l)
keep = re.compile(r"HGMMA|DEPBAR|SYNCS|BAR\.|UTMA|MUFU|MEMBAR")
for i, l in enumerate(lines[:tail]):
  m = re.search(r"BRA\s+`\(\.(L_x_\d+)\)", l)
  if not (m and labels.get(m.group(1), i) < i):
    continue
  s = labels[m.group(1)]
  if not any("HGMMA" in lines[j] for j in range(s, i)):
    continue
  print(f"== loop lines {s}-{i} ({i - s} instructions)")
  run = 0
  for j in range(s, i + 1):
    text = lines[j].split("*/")[-1].strip().rstrip(" ;")
    if not keep.search(text):
      continue
    if text.startswith("MUFU"):
      run += 1
      continue
    if run:
      print(f"  {j - s:4d}  [{run} MUFU]")
      run = 0
    print(f"  {j - s:4d}  {text[:90]}")
