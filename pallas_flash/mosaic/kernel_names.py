"""One compile per distinct kernel: a stable name attribute in the kernels'
modules (issue 50, the first call).

XLA compiles a Mosaic GPU kernel (MLIR -> LLVM -> PTX -> ptxas, inside the
``mosaic_gpu`` custom call) once per process per ``kernel_hash``, the
sha256 of the module's bytecode.  JAX 0.11.2 writes into every module it
lowers a ``mosaic_gpu.dump_basename`` attribute, the kernel's name and a
process-wide counter (``pallas_flash_mosaic_fwd_0``, ``_1``, ...), which
names the files of the ``MOSAIC_GPU_DUMP_*`` debug dumps and nothing else.
With the counter in the bytes, the same kernel lowered twice gets two hashes
and is compiled twice: the forward of a jitted forward and again in a
jitted forward+backward (``benchmarks.run``'s first call), or two layers of
one shape in one program.  ``install`` makes the attribute of our kernels
their name alone, unless a dump is asked for (then the counter keeps the
dump files apart), so equal kernels have equal bytes and XLA compiles them
once.  The kernel code does not change: ``tools.mosaic_modules`` prints the
same modules (it prints the attribute as the counter gave it).
"""
from __future__ import annotations

from jax.experimental.mosaic.gpu import dialect as mgpu_dialect
from jaxlib.mlir import ir

ATTR = "mosaic_gpu.dump_basename"
PREFIX = "pallas_flash_"  # our kernels' module names (forward, backward)
_DUMPS = ("mlir_passes", "ptx", "ptxas", "sass", "sass_ctrl",
          "constraint_system", "resources")


def _stable(get_or_set):
  def get_or_set_dump_options(module):
    attrs = module.operation.attributes
    fresh = ATTR not in attrs
    options = get_or_set(module)
    name = attrs["sym_name"].value if "sym_name" in attrs else ""
    if (fresh and name.startswith(PREFIX)
        and not any(getattr(options, d, False) for d in _DUMPS)):
      attrs[ATTR] = ir.StringAttr.get(name, context=module.context)
    return options
  get_or_set_dump_options.pallas_flash_stable = True
  return get_or_set_dump_options


def install() -> None:
  """Wraps Mosaic GPU's ``get_or_set_dump_options`` (Pallas's lowering and
  Mosaic GPU's passes call it through the dialect module, the first call
  sets the attribute); idempotent, and a no-op on a JAX without it."""
  current = getattr(mgpu_dialect, "get_or_set_dump_options", None)
  if current is None or getattr(current, "pallas_flash_stable", False):
    return
  mgpu_dialect.get_or_set_dump_options = _stable(current)
