"""The Mosaic GPU kernels of the default Hopper path as modules, on any
machine: a refactor's check that the kernels did not change.

Lowers ``jax.grad`` of ``flash_attention`` for CUDA (no GPU needed: the
dispatcher is told it is on a Hopper) for a few cells, takes every Mosaic
GPU custom call's module (MLIR bytecode), prints it without locations (so
moved source lines do not count) and reports one hash per kernel.  Run it
before and after a change and diff the output:

  PYTHONPATH=$PWD python3 -m tools.mosaic_modules > /tmp/before.txt
  (change)
  PYTHONPATH=$PWD python3 -m tools.mosaic_modules > /tmp/after.txt
  diff /tmp/before.txt /tmp/after.txt && echo "same kernels"

``--out DIR`` also writes each module's text.  ``--issue12`` lowers issue
12's benchmark cells at their own shapes instead (bf16, B*T = 16384, N*H =
2048: d64 / d128 at T = 4k, 16k, d256 at 1k, 4k, causal and not, and the
T = 131072 cell), so a timing taken at one commit can be shown to hold at
another (the launch rules read the shapes).
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
from benchmarks import workloads
from pallas_flash import _dispatch
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
  return lower_workload(_cell(h, causal, rate, b, t))


def _cell(h: int, causal: bool, rate: float, b: int = 2, t: int = 1000):
  """A [b, t] GQA 4/2 bf16 cell of ``CELLS`` as a ``Workload``."""
  return workloads.Workload(
      name="modules", batch=b, seqlen=t, heads=4, kv_heads=2, head_dim=h,
      causal=causal, dtype="bfloat16", dropout=rate)


def lower_workload(w: workloads.Workload) -> str:
  """The lowered text (without locations) of grad(flash_attention) for a
  dense workload (its shapes, dtype, causal flag and dropout rate) on the
  default Hopper path, with no GPU present."""
  dtype = jnp.dtype(w.dtype)
  q = jax.ShapeDtypeStruct((w.batch, w.seqlen, w.heads, w.head_dim), dtype)
  kv = jax.ShapeDtypeStruct((w.batch, w.kv_len, w.kv_heads, w.head_dim),
                            dtype)
  kw = (dict(dropout_rate=w.dropout, dropout_rng=jax.random.key(0))
        if w.dropout else {})

  def loss(q, k, v):
    return pf.flash_attention(q, k, v, is_causal=w.causal, **kw).astype(
        jnp.float32).sum()
  with mock.patch.object(_dispatch, "on_gpu", lambda: True), \
      mock.patch.object(_dispatch, "is_hopper", lambda: True), \
      mock.patch.object(mosaic_forward, "check_supported", lambda *a: None), \
      mock.patch.object(mosaic_forward, "_num_sms", lambda: 132):
    lowered = jax.jit(jax.grad(loss, (0, 1, 2))).trace(q, kv, kv).lower(
        lowering_platforms=("cuda",))
  return lowered.as_text(debug_info=False)


def issue12_cells() -> list[workloads.Workload]:
  """Issue 12's benchmark cells (``python -m benchmarks.run --workloads
  convention long``, the rows of its table), bf16."""
  bf16 = ("bfloat16",)
  return (workloads.convention(seqlens=(4096, 16384), head_dims=(64, 128),
                               dtypes=bf16)
          + workloads.convention(seqlens=(1024, 4096), head_dims=(256,),
                                 dtypes=bf16)
          + workloads.long_context())


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--out", default=None, help="also write each module here")
  ap.add_argument("--issue12", action="store_true",
                  help="issue 12's benchmark cells at their own shapes")
  args = ap.parse_args(argv)
  if args.issue12:
    cells = [(w.label, w.label.replace(" ", "_"), w)
             for w in issue12_cells()]
  else:
    cells = [(f"d{h} {'causal' if causal else 'non-causal'} dropout {rate}",
              f"d{h}_{int(causal)}_{rate}", _cell(h, causal, rate))
             for h, causal, rate in CELLS]
  lines = []
  for cell, stem, w in cells:
    for i, (name, text) in enumerate(kernel_modules(lower_workload(w))):
      digest = hashlib.sha256(text.encode()).hexdigest()[:16]
      lines.append(f"{cell}: {name} {digest} ({len(text)} chars)")
      print(lines[-1], flush=True)
      if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, f"{stem}_{i}.mlir"), "w") as f:
          f.write(text)
  return lines


if __name__ == "__main__":
  main()
