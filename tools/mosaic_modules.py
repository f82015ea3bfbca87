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
another (the launch rules read the shapes).  ``--wide`` lowers ``WIDE``
instead: every masking and score option the kernels read (dropout, ALiBi,
soft-cap, segments, dense masks, windows, lengths, the bottom-right
diagonal, GQA and MQA) across d64 / d128 / d256, and the kernels' config
branches (consumers, softmax overlap, persistence, row rings, fused and
split backward), a bias and the fp8 forward, for a refactor of the kernels
themselves.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import itertools
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
from pallas_flash.mosaic import compile_ahead
from pallas_flash.mosaic import forward as mosaic_forward
from pallas_flash.mosaic.config import MosaicBackwardConfig, MosaicConfig

# (head dim, causal, dropout rate): each backward form of the defaults
# (d64 fused, d128 two kernels with and without dropout, d256 split).
CELLS = [(64, True, 0.0), (128, False, 0.0), (128, True, 0.1),
         (256, True, 0.0)]



def _wide(name, h, causal=True, *, n=4, k=2, s=None, fwd=None, bwd=None,
          dtype="bfloat16", **options) -> workloads.Workload:
  """A [2, 1000] cell of ``WIDE`` (bf16 unless ``dtype``): GQA n/k, the
  given mask and score options (``Workload`` fields) and, where given, a
  forward / backward config (then lowered with
  ``implementation="mosaic"``)."""
  config = (MosaicConfig(**(fwd or {}), backward=MosaicBackwardConfig(
      **bwd) if bwd else None) if fwd or bwd else None)
  return workloads.Workload(
      name=name, batch=2, seqlen=1000, kv_seqlen=s, heads=n, kv_heads=k,
      head_dim=h, causal=causal, dtype=dtype, config=config, **options)


# The cells of ``--wide``: each feature at d64, d128 and d256 (GQA 4/2
# unless named), then the non-default kernel configs.
WIDE = [
    *[_wide("dropout", h, c, dropout=0.1)
      for h, c in ((64, True), (128, False), (256, True))],
    *[_wide("alibi", h, c, alibi=True)
      for h, c in ((64, False), (128, True), (128, False), (256, True))],
    *[_wide("soft-cap", h, c, soft_cap=20.0)
      for h, c in ((64, True), (128, True), (128, False), (256, False))],
    _wide("alibi soft-cap", 256, False, alibi=True, soft_cap=20.0),
    _wide("dropout alibi", 64, False, dropout=0.1, alibi=True),
    _wide("dropout alibi soft-cap", 128, True, dropout=0.1, alibi=True,
          soft_cap=20.0),
    *[_wide("segments", h, c, segments=True)
      for h, c in ((64, True), (128, True), (256, False))],
    _wide("dense mask full", 64, False, dense_mask="full"),
    _wide("dense mask heads", 128, False, dense_mask="heads"),
    _wide("dense mask keys", 256, True, dense_mask="keys"),
    *[_wide("window", h, c, window=(128, 64))
      for h, c in ((64, False), (128, True), (256, False))],
    *[_wide("bottom-right S1200", h, True, s=1200, bottom_right=True)
      for h in (64, 128, 256)],
    _wide("bottom-right S800 lengths", 128, True, s=800, bottom_right=True,
          q_lengths=(1000, 0), kv_lengths=(800, 77)),
    _wide("lengths", 64, False, q_lengths=(900, 1000), kv_lengths=(1000, 5)),
    *[_wide("mqa 4/1", h, c, k=1) for h, c in ((64, False), (256, True))],
    _wide("mha 4/4 segments dropout", 128, False, k=4, segments=True,
          dropout=0.1),
    _wide("not deterministic", 64, True, deterministic=False),
    _wide("not deterministic", 128, False, deterministic=False),
    # forward configs
    _wide("fwd 3 consumers", 64, True, fwd=dict(consumers=3)),
    _wide("fwd 3 consumers overlap", 64, False,
          fwd=dict(consumers=3, overlap_softmax=True)),
    _wide("fwd persistent heads_inner", 128, True,
          fwd=dict(persistent=True, heads_inner=True, overlap_softmax=True)),
    _wide("fwd persistent block_kv 256", 64, False,
          fwd=dict(block_kv=256, persistent=True)),
    _wide("fwd masked last overlap persistent", 256, True,
          fwd=dict(block_kv=64, masked_first=False, overlap_softmax=True,
                   persistent=True)),
    _wide("fwd overlap dense mask", 128, False, dense_mask="full",
          fwd=dict(overlap_softmax=True)),
    _wide("fwd persistent dropout alibi", 128, True, dropout=0.1,
          alibi=True, fwd=dict(persistent=True, overlap_softmax=True)),
    _wide("fwd 3 stages window", 128, False, window=(200, 0),
          fwd=dict(num_stages=3)),
    # backward configs
    _wide("bwd prefetch persistent stagger segments", 128, True,
          segments=True, bwd=dict(prefetch_rows=True, persistent=True,
                                  stagger_consumers=True)),
    _wide("bwd prefetch row_ring stagger dropout", 128, False, dropout=0.1,
          bwd=dict(prefetch_rows=True, row_ring=True, stagger_consumers=True,
                   dkdv_registers=240)),
    _wide("bwd fused row_ring persistent dropout", 64, True, dropout=0.1,
          bwd=dict(row_ring=True, persistent=True, fused=True,
                   block_q_dkv=128, block_kv_dq=128)),
    _wide("bwd fused not deterministic alibi", 128, True, alibi=True,
          bwd=dict(fused=True, deterministic=False)),
    _wide("bwd fused deterministic soft-cap", 128, False, soft_cap=20.0,
          bwd=dict(fused=True)),
    _wide("bwd 3 consumers dq rows in registers", 128, True,
          bwd=dict(consumers=3, dq_rows_in_registers=2)),
    _wide("bwd dq 3 consumers masked last", 64, False, window=(100, 100),
          bwd=dict(dq_consumers=3, masked_first=False,
                   dq_rows_in_registers=1)),
    _wide("bwd split row_ring persistent dropout", 128, True, dropout=0.1,
          bwd=dict(split_head_dim=True, row_ring=True, persistent=True)),
    _wide("bwd split d128 stagger alibi", 128, False, alibi=True,
          bwd=dict(split_head_dim=True, stagger_consumers=True)),
    _wide("bwd 3 stages prefetch", 128, True, dense_mask="keys",
          bwd=dict(num_stages=3, prefetch_rows=True)),
    # a [1, N, T, S] bias (the bias rings; dbias is not asked for; at d256
    # the backward with a bias is Pallas-Triton's, which needs a GPU to
    # lower), and the fp8 forward (forward only, unit descales)
    *[_wide("bias", h, c, bias=True) for h, c in ((64, False), (128, True))],
    _wide("fp8", 64, False, dtype="float8_e4m3fn"),
    _wide("fp8 lengths", 128, True, dtype="float8_e4m3fn",
          q_lengths=(1000, 300), kv_lengths=(1000, 700)),
    _wide("fp8 window", 128, False, dtype="float8_e4m3fn", window=(256, 0)),
    _wide("fp8", 256, False, dtype="float8_e4m3fn"),
]


def kernel_modules(lowered_text: str) -> list[tuple[str, str]]:
  """[(kernel name, module text without locations)] of the mosaic_gpu
  custom calls in a lowered program's text."""
  return [(k["name"], k["text"]) for k in kernel_calls(lowered_text)]


def kernel_calls(lowered_text: str) -> list[dict]:
  """The mosaic_gpu custom calls of a lowered program's text, in order:
  dicts of the kernel ``name``, its module ``text`` without locations, the
  module's bytecode ``raw`` (what XLA compiles) and ``kernel_hash`` (the
  sha256 of it by which XLA's compile cache knows the kernel)."""
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
            digest = bytes(ir.StringAttr(config["kernel_hash"]).value_bytes)
            with ctx:
              module = ir.Module.parse(raw)
            text = module.operation.get_asm(enable_debug_info=False)
            names = re.findall(r"sym_name = \"(pallas_flash_\w+?)\"", text)
            out.append(dict(name=names[0] if names else "?", text=text,
                            raw=raw, kernel_hash=digest))
          visit(inner.operation)
  visit(program.operation)
  return out


def as_counted(text: str, index: int) -> str:
  """The module text with its ``mosaic_gpu.dump_basename`` (the name of
  the debug dump files, no part of the kernel) as JAX's process counter
  gives it, ``<module name>_<index>`` for the index-th module lowered in
  the process, whatever the library set (``mosaic.kernel_names`` drops the
  counter so that equal kernels compile once).  The hashes then stay those
  of listings made before that change (``benchmarks/results/*/modules_*``):
  this tool's lowerings are its only ones, in the order printed."""
  return re.sub(r'mosaic_gpu\.dump_basename = "(\w+?)(_\d+)?"',
                lambda m: f'mosaic_gpu.dump_basename = '
                          f'"{m.group(1)}_{index}"', text, count=1)


@contextlib.contextmanager
def as_on_hopper():
  """The default dispatch as on a Hopper GPU (132 SMs) on any machine, for
  programs that are lowered (``lowering_platforms=("cuda",)``) and never
  compiled: no kernel is compiled ahead (``mosaic/compile_ahead.py``)."""
  with mock.patch.object(_dispatch, "on_gpu", lambda: True), \
      mock.patch.object(_dispatch, "is_hopper", lambda: True), \
      mock.patch.object(mosaic_forward, "check_supported", lambda *a: None), \
      mock.patch.object(mosaic_forward, "_num_sms", lambda: 132), \
      compile_ahead.suspended():
    yield


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
  with as_on_hopper():
    lowered = jax.jit(jax.grad(loss, (0, 1, 2))).trace(q, kv, kv).lower(
        lowering_platforms=("cuda",))
  return lowered.as_text(debug_info=False)


def lower_call(w: workloads.Workload) -> str:
  """As ``lower_workload``, with every option of the workload's call
  (``Workload.inputs``: masks, lengths, segments, ALiBi, soft-cap,
  dropout, the alignment, ``deterministic``); the arrays among them are
  arguments of the lowered function, not constants.  A workload with a
  ``config`` is lowered with ``implementation="mosaic"`` (the default
  dispatch ignores a config)."""
  q, k, v, kw = w.inputs()
  if w.bias:  # (Workload.inputs leaves the bias to make_inputs)
    kw["bias"] = workloads.head_bias(jax.random.key(w.seed), w.heads,
                                     w.seqlen, w.kv_len, w.dtype)
  arrays = {n: x for n, x in kw.items() if isinstance(x, jax.Array)}
  static = {n: x for n, x in kw.items() if n not in arrays}
  if w.config is not None:
    static.update(implementation="mosaic", config=w.config)
  spec = lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype)

  def loss(q, k, v, arrays):
    return pf.flash_attention(q, k, v, **static, **arrays).astype(
        jnp.float32).sum()
  # fp8 takes no derivative: its forward alone
  fn = loss if jnp.dtype(w.dtype).itemsize == 1 else jax.grad(loss, (0, 1, 2))
  with as_on_hopper():
    lowered = jax.jit(fn).trace(
        spec(q), spec(k), spec(v), jax.tree.map(spec, arrays)).lower(
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
  ap.add_argument("--wide", action="store_true",
                  help="every masking option and kernel config (WIDE)")
  args = ap.parse_args(argv)
  lower = lower_workload
  if args.issue12:
    cells = [(w.label, w.label.replace(" ", "_"), w)
             for w in issue12_cells()]
  elif args.wide:
    cells = [(f"{w.name} d{w.head_dim} {'C' if w.causal else 'N'}",
              f"wide{i}", w) for i, w in enumerate(WIDE)]
    lower = lower_call
  else:
    cells = [(f"d{h} {'causal' if causal else 'non-causal'} dropout {rate}",
              f"d{h}_{int(causal)}_{rate}", _cell(h, causal, rate))
             for h, causal, rate in CELLS]
  lines = []
  kernels = itertools.count()  # JAX's counter of lowered modules, as below
  for cell, stem, w in cells:
    modules = [(name, as_counted(text, next(kernels)))
               for name, text in kernel_modules(lower(w))]
    if not modules:  # (a cell the Mosaic kernels did not take)
      lines.append(f"{cell}: no Mosaic GPU kernel")
      print(lines[-1], flush=True)
    for i, (name, text) in enumerate(modules):
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
