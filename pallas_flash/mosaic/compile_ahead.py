"""Each kernel compiled while the rest of its program lowers (issue 50, the
first call).

XLA compiles a Mosaic GPU kernel (MLIR -> LLVM -> PTX -> ptxas) inside the
``mosaic_gpu_v2`` custom call's instantiation, once per process per
``kernel_hash`` (a process-wide cache in jaxlib), and only once the whole
program has been traced and lowered.  A jitted training step holds up to
three of our kernels (forward, dK/dV, dQ): their compiles ran one after the
other, after the Python lowering of all three.  ``install`` starts each of
our kernels' compile as soon as its custom call is emitted: a one-op program
holding the same custom call (same module bytes, same hash) is compiled on a
worker thread (XLA's compile releases the GIL), which fills jaxlib's kernel
cache while the main thread lowers the rest; before the program's own
compile the main thread waits for those workers, and XLA then finds every
kernel compiled.

Only our kernels (``pallas_flash_`` names), only on a GPU backend, each
hash once per process; not for kernels lowered inside a compile (under
SPMD partitioning ``custom_partitioning`` lowers them from XLA's callback,
and that compile reaches them next), for ``jax.export``, or inside
``suspended()``.  Best effort: any failure leaves the kernel to the
program's own compile.  ``PALLAS_FLASH_COMPILE_AHEAD=0`` in the environment
at import leaves JAX as it is.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import os
import threading

from jaxlib.mlir import ir

from pallas_flash.mosaic import kernel_names

WORKERS = 4
_lock = threading.Lock()
_pool: concurrent.futures.ThreadPoolExecutor | None = None
_started: dict[bytes, concurrent.futures.Future] = {}
# per thread: .depth, XLA compiles running; .suspended, ``suspended`` blocks
_thread = threading.local()


def _one_op_program(op) -> bytes:
  """A module whose main function is the custom call ``op`` alone, as
  bytecode (built in ``op``'s context, on the lowering thread)."""
  from jax._src.interpreters import mlir
  from jaxlib.mlir.dialects import func as func_dialect
  loc = ir.Location.unknown(op.context)
  with op.context, loc:
    module = ir.Module.create()
    module.operation.attributes["sym_name"] = ir.StringAttr.get(
        "pallas_flash_compile_ahead")
    in_types = [v.type for v in op.operands]
    out_types = [r.type for r in op.results]
    with ir.InsertionPoint(module.body):
      fn = func_dialect.FuncOp("main", (in_types, out_types))
      fn.attributes["sym_visibility"] = ir.StringAttr.get("public")
      block = fn.add_entry_block()
      with ir.InsertionPoint(block):
        call = ir.Operation.create(
            op.name, results=out_types, operands=list(block.arguments),
            attributes={name: op.attributes[name] for name in op.attributes
                        if name != "mhlo.sharding"})
        func_dialect.ReturnOp(call.results)
    return mlir.module_to_bytecode(module)


def _compile(program: bytes, platform: str) -> None:
  from jax._src import compiler, xla_bridge
  backend = xla_bridge.get_backend(platform)
  device = backend.local_devices()[0]
  options = compiler.get_compile_options(num_replicas=1, num_partitions=1)
  backend.compile_and_load(program, [device], options)


def _start(outs, platform: str) -> None:
  global _pool
  from jax._src import xla_bridge
  if getattr(_thread, "depth", 0) or getattr(_thread, "suspended", 0):
    # lowered inside a compile (custom_partitioning's callback under SPMD
    # partitioning: that compile reaches the kernel next), or suspended
    return
  if platform not in xla_bridge.backends():  # (lowered for another machine)
    return
  op = outs[0].owner
  op = getattr(op, "operation", op)
  config = ir.DictAttr(op.attributes["mhlo.backend_config"])
  key = ir.StringAttr(config["kernel_hash"]).value_bytes
  with _lock:
    if key in _started:
      return
    program = _one_op_program(op)
    if _pool is None:
      _pool = concurrent.futures.ThreadPoolExecutor(
          WORKERS, thread_name_prefix="pallas_flash_compile")
    _started[key] = _pool.submit(_compile, program, platform)


@contextlib.contextmanager
def suspended():
  """No kernel lowered inside (on this thread) is compiled ahead: for
  programs lowered and never compiled (the tools that read modules)."""
  _thread.suspended = getattr(_thread, "suspended", 0) + 1
  try:
    yield
  finally:
    _thread.suspended -= 1


def wait() -> None:
  """Waits for the kernels' compiles started so far (their errors are the
  program's own compile's to report)."""
  with _lock:
    pending = [f for f in _started.values() if not f.done()]
  concurrent.futures.wait(pending)


def _wrap_rule(rule):
  def _mosaic_gpu_lowering_rule(ctx, *args, module, **kwargs):
    outs = rule(ctx, *args, module=module, **kwargs)
    try:  # best effort: otherwise the program's compile does it
      attrs = module.operation.attributes
      name = ir.StringAttr(attrs["sym_name"]).value
      platforms = tuple(ctx.module_context.platforms)
      export = ctx.module_context.lowering_parameters.for_export
      if (name.startswith(kernel_names.PREFIX) and outs
          and len(platforms) == 1 and not export):
        _start(outs, platforms[0])
    except Exception:
      pass
    return outs
  _mosaic_gpu_lowering_rule.pallas_flash_ahead = True
  return _mosaic_gpu_lowering_rule


def _wrap_compile(compile_fn):
  def backend_compile_and_load(*args, **kwargs):
    depth = getattr(_thread, "depth", 0)
    if not depth:  # (a compile nested in a compile's callback does not wait)
      wait()
    _thread.depth = depth + 1
    try:
      return compile_fn(*args, **kwargs)
    finally:
      _thread.depth = depth
  backend_compile_and_load.pallas_flash_ahead = True
  return backend_compile_and_load


def install() -> None:
  """Wraps Mosaic GPU's custom call lowering rule (Pallas's registration
  calls it through its module) and JAX's ``backend_compile_and_load``;
  idempotent, a no-op on a JAX without them or with
  PALLAS_FLASH_COMPILE_AHEAD=0."""
  if os.environ.get("PALLAS_FLASH_COMPILE_AHEAD", "1") == "0":
    return
  try:
    from jax._src import compiler
    from jax.experimental.mosaic.gpu import core as mgpu_core
  except ImportError:
    return
  rule = getattr(mgpu_core, "_mosaic_gpu_lowering_rule", None)
  compile_fn = getattr(compiler, "backend_compile_and_load", None)
  if rule is None or compile_fn is None:
    return
  if not getattr(rule, "pallas_flash_ahead", False):
    mgpu_core._mosaic_gpu_lowering_rule = _wrap_rule(rule)
  if not getattr(compile_fn, "pallas_flash_ahead", False):
    compiler.backend_compile_and_load = _wrap_compile(compile_fn)
