"""Compiles the d128 S4k N backward (the deterministic=False config, or with a second argument "default" the
deterministic default) with Mosaic GPU's dumps on (MOSAIC_GPU_DUMP_PTX / _SASS, MOSAIC_GPU_DUMP_TO set by the
caller) and prints, where a SASS dump exists, each local-memory access (STL / LDL) of the dK/dV kernel with a few
lines around it.

  MOSAIC_GPU_DUMP_PTX=1 MOSAIC_GPU_DUMP_TO=DIR python3 sass_spills.py DIR [default]
"""
import dataclasses
import pathlib
import re
import sys

import jax
import jax.numpy as jnp

import pallas_flash as pf
from pallas_flash.mosaic.config import MosaicBackwardConfig, MosaicConfig

out = pathlib.Path(sys.argv[1])
h, t, b, n = 128, 4096, 4, 16
keys = jax.random.split(jax.random.key(0), 4)
q, k, v, do = (jax.random.normal(x, (b, t, n, h), jnp.bfloat16) for x in keys)
cfg = dataclasses.replace(MosaicConfig.default(h, False, kv_seqlen=t),
                          backward=MosaicBackwardConfig.default(
                              h, False, deterministic=len(sys.argv) > 2))
f = lambda q, k, v: pf.flash_attention(q, k, v, implementation="mosaic",
                                       config=cfg)
g = jax.jit(lambda q, k, v, do: jax.vjp(f, q, k, v)[1](do))
g.lower(q, k, v, do).compile()
files = sorted(p for p in out.rglob("*") if p.is_file())
print("dumped:", [p.name for p in files][:20])
for p in files:
  if "dkdv" not in p.name or "sass" not in p.name.lower():
    continue
  lines = p.read_text(errors="replace").splitlines()
  hits = [i for i, l in enumerate(lines) if re.search(r"\b(STL|LDL)\b", l)]
  print(f"{p.name}: {len(lines)} lines, {len(hits)} local-memory accesses")
  shown = set()
  for i in hits:
    lo, hi = max(0, i - 4), min(len(lines), i + 3)
    if i in shown:
      continue
    print(f"--- line {i}")
    for j in range(lo, hi):
      shown.add(j)
      print(("> " if j == i else "  ") + lines[j].strip()[:140])
