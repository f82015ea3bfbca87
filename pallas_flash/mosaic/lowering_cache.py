"""One lowering per kernel per process (issue 50, the first call).

JAX lowers a Mosaic GPU kernel (Pallas's lowering of its jaxpr, then Mosaic
GPU's Python passes: layout inference, dialect lowering) once per jitted
program that contains it: the forward kernel of a jitted forward is lowered
again inside a jitted forward+backward (``benchmarks.run``'s first call, a
training step beside an evaluation step), 0.5-2.3 s of Python per kernel on
a CPU (``tools.first_call``).  The two programs hold the same kernel jaxpr
object (``sharding._bound``: one trace per kind of call), so ``install``
keeps each of our kernels' modules, as bytecode, under the identity of its
jaxpr and call-site traceback and the rest of the lowering's arguments, and
a later program parses the bytes into its own MLIR context instead of
lowering again.  The bytes are those the first lowering produced (before the
custom call's serialization pass), so XLA sees the same module and
``kernel_hash`` (a test compares them with a fresh lowering).

Only our kernels (``pallas_flash_`` names), and none while Mosaic GPU's
debug dumps are on (the dump files are named per lowering).  Bounded: the
``MAX_ENTRIES`` most recently used kernels.  ``PALLAS_FLASH_LOWERING_CACHE=0``
in the environment at import leaves JAX's lowering as it is.
"""
from __future__ import annotations

import collections
import dataclasses
import io
import os
import threading

from jaxlib.mlir import ir

from pallas_flash.mosaic import kernel_names

MAX_ENTRIES = 64
_cache: collections.OrderedDict = collections.OrderedDict()
_lock = threading.Lock()  # (programs may lower in several threads)


def _stable_name(module, name: str) -> bool:
  """Whether the module's dump attribute is its bare name (no debug dump:
  ``kernel_names``), so its bytes do not depend on the lowering count."""
  attrs = module.operation.attributes
  return (kernel_names.ATTR in attrs
          and ir.StringAttr(attrs[kernel_names.ATTR]).value == name)


def _memo(lower):
  def lower_unpipelined_jaxpr_to_module(mesh, jax_mesh, jaxpr, in_shapes,
                                        out_shapes, params, *,
                                        outer_traceback=None):
    def fresh():
      return lower(mesh, jax_mesh, jaxpr, in_shapes, out_shapes, params,
                   outer_traceback=outer_traceback)
    name = getattr(jaxpr.debug_info, "func_name", "") or ""
    if not name.startswith(kernel_names.PREFIX):
      return fresh()
    try:
      key = (id(jaxpr), id(outer_traceback), mesh, jax_mesh,
             tuple(in_shapes), tuple(out_shapes), params)
      hash(key)
    except TypeError:  # an unhashable argument: no memo
      return fresh()
    with _lock:
      entry = _cache.get(key)
      hit = (entry is not None and entry[0] is jaxpr
             and entry[1] is outer_traceback)
      if hit:
        _cache.move_to_end(key)
    if hit:
      return dataclasses.replace(entry[3], module=ir.Module.parse(entry[2]))
    result = fresh()
    if _stable_name(result.module, name):
      buf = io.BytesIO()
      result.module.operation.write_bytecode(buf)
      with _lock:  # (the jaxpr and traceback are kept: their ids stay theirs)
        _cache[key] = (jaxpr, outer_traceback, buf.getvalue(),
                       dataclasses.replace(result, module=None))
        while len(_cache) > MAX_ENTRIES:
          _cache.popitem(last=False)
    return result
  lower_unpipelined_jaxpr_to_module.pallas_flash_memo = True
  return lower_unpipelined_jaxpr_to_module


def clear() -> None:
  with _lock:
    _cache.clear()


def install() -> None:
  """Wraps Pallas's ``lower_unpipelined_jaxpr_to_module`` (what
  ``plgpu.kernel``'s lowering calls, through its module); idempotent, and
  a no-op on a JAX without it or with PALLAS_FLASH_LOWERING_CACHE=0."""
  if os.environ.get("PALLAS_FLASH_LOWERING_CACHE", "1") == "0":
    return
  try:
    from jax._src.pallas.mosaic_gpu import lowering
  except ImportError:
    return
  current = getattr(lowering, "lower_unpipelined_jaxpr_to_module", None)
  if current is None or getattr(current, "pallas_flash_memo", False):
    return
  lowering.lower_unpipelined_jaxpr_to_module = _memo(current)
