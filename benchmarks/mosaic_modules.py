"""The Mosaic GPU kernels of the default Hopper path as modules, on any
machine: a refactor's check that the kernels did not change.

Lowers ``jax.grad`` of ``flash_attention`` for CUDA (no GPU needed: the
dispatcher is told it is on a Hopper) for a few cells, takes every Mosaic
GPU custom call's module (MLIR bytecode), prints it without locations (so
moved source lines do not count) and reports one hash per kernel.  Run it
before and after a change and diff the output:

  PYTHONPATH=$PWD python3 -m benchmarks.mosaic_modules > /tmp/before.txt
  (change)
  PYTHONPATH=$PWD python3 -m benchmarks.mosaic_modules > /tmp/after.txt
  diff /tmp/before.txt /tmp/after.txt && echo "same kernels"

``--out DIR`` also writes each module's text.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import re
from unittest import mock

import jax
import jax.numpy as jnp
from jax._src.interpreters import mlir as jax_mlir
from jax._src.lib import mosaic_gpu_dialect
from jax._src.lib.mlir import ir

import pallas_flash as pf
from pallas_flash import api
from pallas_flash.mosaic import forward as mosaic_forward

# (head dim, causal, dropout rate): each backward form of the defaults
# (d64 fused, d128 two kernels with and without dropout, d256 split).
CELLS = [(64, True, 0.0), (128, False, 0.0), (128, True, 0.1),
         (256, True, 0.0)]


def kernel_modules(lowered_text: str) -> list[tuple[str, str]]:
  """[(kernel name, module text without locations)] of the mosaic_gpu
  custom calls in a lowered program's text."""
  ctx = jax_mlir.make_ir_context()
  ctx.allow_unregistered_dialects = True
  mosaic_gpu_dialect.register_dialect(ctx)
  program = ir.Module.parse(lowered_text, context=ctx)
  out = []

  def visit(op):
    for region in op.regions:
      for block in region.blocks:
        for inner in block.operations:
          if (inner.operation.name == "stablehlo.custom_call"
              and "mhlo.backend_config" in inner.attributes):
            config = inner.attributes["mhlo.backend_config"]
            raw = bytes(ir.StringAttr(config["module"]).value_bytes)
            with ctx:
              module = ir.Module.parse(raw)
            text = module.operation.get_asm(enable_debug_info=False)
            names = re.findall(r"sym_name = \"(pallas_flash_\w+?)\"", text)
            out.append((names[0] if names else "?", text))
          visit(inner.operation)
  visit(program.operation)
  return out


def lower_cell(h: int, causal: bool, rate: float, b: int = 2, t: int = 1000):
  """The lowered text (without locations) of grad(flash_attention) for a
  [b, t] GQA 4/2 cell on the default Hopper path (also the lowering tests'
  entry, tests/test_mosaic.py)."""
  q = jax.ShapeDtypeStruct((b, t, 4, h), jnp.bfloat16)
  kv = jax.ShapeDtypeStruct((b, t, 2, h), jnp.bfloat16)
  kw = dict(dropout_rate=rate, dropout_rng=jax.random.key(0)) if rate else {}

  def loss(q, k, v):
    return pf.flash_attention(q, k, v, is_causal=causal, **kw).astype(
        jnp.float32).sum()
  with mock.patch.object(api, "_on_gpu", lambda: True), \
      mock.patch.object(api, "_is_hopper", lambda: True), \
      mock.patch.object(mosaic_forward, "check_supported", lambda *a: None), \
      mock.patch.object(mosaic_forward, "_num_sms", lambda: 132):
    lowered = jax.jit(jax.grad(loss, (0, 1, 2))).trace(q, kv, kv).lower(
        lowering_platforms=("cuda",))
  return lowered.as_text(debug_info=False)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--out", default=None, help="also write each module here")
  args = ap.parse_args(argv)
  lines = []
  for h, causal, rate in CELLS:
    cell = f"d{h} {'causal' if causal else 'non-causal'} dropout {rate}"
    for i, (name, text) in enumerate(kernel_modules(
        lower_cell(h, causal, rate))):
      digest = hashlib.sha256(text.encode()).hexdigest()[:16]
      lines.append(f"{cell}: {name} {digest} ({len(text)} chars)")
      if args.out:
        os.makedirs(args.out, exist_ok=True)
        path = os.path.join(args.out, f"d{h}_{int(causal)}_{rate}_{i}.mlir")
        with open(path, "w") as f:
          f.write(text)
  print("\n".join(lines))
  return lines


if __name__ == "__main__":
  main()
