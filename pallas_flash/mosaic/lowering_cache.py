"""Each kernel lowered once per process, and once per cache directory across
processes (issue 50, the first call).

JAX lowers a Mosaic GPU kernel (Pallas's lowering of its jaxpr, then Mosaic
GPU's Python passes: layout inference, dialect lowering) once per jitted
program that contains it, 0.5-2.3 s of Python per kernel on a CPU
(``tools.first_call``), and again in every new process.  ``install`` wraps
Pallas's ``lower_unpipelined_jaxpr_to_module`` with two tiers, for our
kernels only (``pallas_flash_`` names):

* **In the process**: the forward kernel of a jitted forward is lowered again
  inside a jitted forward+backward (``benchmarks.run``'s first call, a
  training step beside an evaluation step).  The two programs hold the same
  kernel jaxpr object (``sharding._bound``: one trace per kind of call), so
  each module is kept, as bytecode, under the identity of its jaxpr and
  call-site traceback and the rest of the lowering's arguments, and a later
  program parses the bytes into its own MLIR context.  Bounded: the
  ``MAX_ENTRIES`` most recently used kernels.
* **Across processes** (a restart, a test run, the workers of one job): when
  JAX's persistent compilation cache is on (``jax_compilation_cache_dir``, a
  local path), the modules are also written to its ``pallas_flash_modules``
  folder under a key of their content, and a later process that lowers an
  equal kernel reads the module back instead (JAX's cache then holds the
  compiled program too; with both, a restart's first call skips lowering and
  compiling).  ``PALLAS_FLASH_MODULE_CACHE=DIR`` picks another folder, ``=0``
  turns this tier off.  Nothing evicts the files (a few hundred KB a kernel;
  JAX's ``jax_compilation_cache_max_size`` counts only its own).

The bytes returned are those the first lowering produced (before the custom
call's serialization pass), so XLA sees the same module and ``kernel_hash``
as from a fresh lowering (tests compare them); a module read from disk keeps
the source locations of the process that wrote it (debug info only).

The disk key (``disk_key``) is a sha256 of everything the module is a
function of: the source files of this package and of JAX's Pallas Mosaic GPU
lowering and Mosaic GPU, the JAX and jaxlib versions, the GPU architecture
Mosaic GPU lowers for, and the lowering's arguments -- the kernel jaxpr
walked equation by equation, every parameter included, and every Python
function in it (the inline-PTX bodies) by its code, defaults and the values
its closure holds, recursively.  A value the key cannot describe by content
(an object whose printed form carries an address, a type not listed in
``_fingerprint``) leaves that kernel out of the disk tier: the key is never
a guess from names.  Assumed, not checked: that the globals those functions
read are what the digested sources define (a helper monkeypatched while a
kernel lowers would not change its key).  The key was checked to be the same
in two processes (different hash seeds) for every kernel
``tools.mosaic_modules --wide`` and ``--issue12`` lower (183 kernels: 181
distinct modules, 181 distinct keys, one to one), on JAX 0.11.2 and 0.12.0.1.

Neither tier runs while Mosaic GPU's debug dumps are on (their files are
named per lowering).  ``PALLAS_FLASH_LOWERING_CACHE=0`` in the environment at
import leaves JAX's lowering as it is.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import enum
import functools
import hashlib
import io
import json
import os
import pathlib
import re
import threading
import types

import jax
import jaxlib
import numpy as np
from jax._src import core as jax_core
from jaxlib.mlir import ir

from pallas_flash.mosaic import kernel_names

MAX_ENTRIES = 64
_cache: collections.OrderedDict = collections.OrderedDict()
_lock = threading.Lock()  # (programs may lower in several threads)
_FORMAT = b"pallas_flash module cache 1\n"  # a file's first line
ENV = "PALLAS_FLASH_MODULE_CACHE"


def _stable_name(module, name: str) -> bool:
  """Whether the module's dump attribute is its bare name (no debug dump:
  ``kernel_names``), so its bytes do not depend on the lowering count."""
  attrs = module.operation.attributes
  return (kernel_names.ATTR in attrs
          and ir.StringAttr(attrs[kernel_names.ATTR]).value == name)


# ---------------------------------------------------------------- the key


class _Uncacheable(Exception):
  """A lowering argument the disk key cannot describe by its content."""


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+|id=\d{6,}")


def _repr_without_address(x) -> str:
  r = repr(x)
  if _ADDRESS.search(r):
    raise _Uncacheable(f"{type(x).__qualname__}: {r[:80]}")
  return r


@functools.cache
def _by_repr_types() -> tuple[type, ...]:
  """Types whose repr is their whole content (checked for addresses)."""
  from jax._src import mesh as mesh_lib
  from jax._src import named_sharding
  return (jax.sharding.Mesh, mesh_lib.AbstractMesh,
          jax.sharding.PartitionSpec, named_sharding.UnspecifiedValue,
          named_sharding.NamedSharding)


# (JAX 0.12 has no ClosedJaxpr: a Jaxpr carries its consts)
_JAXPR_TYPES = tuple(t for t in (getattr(jax_core, "Jaxpr", None),
                                 getattr(jax_core, "ClosedJaxpr", None))
                     if t is not None)


def _fingerprint(x, out: list, depth: int = 0) -> None:
  """Appends a description of ``x`` by content to ``out`` (strings and
  bytes), or raises _Uncacheable."""
  if depth > 64:
    raise _Uncacheable("nested too deep")
  put, rec = out.append, lambda y: _fingerprint(y, out, depth + 1)
  if x is None or isinstance(x, (bool, int, float, complex, str, bytes)):
    put(f"{type(x).__name__}:{x!r};")
  elif isinstance(x, enum.Enum):
    put(f"enum:{type(x).__module__}.{type(x).__qualname__}.{x.name};")
  elif isinstance(x, np.dtype):
    put(f"dtype:{x.str}:{x.name};")
  elif isinstance(x, type):
    put(f"type:{x.__module__}.{x.__qualname__};")
  elif isinstance(x, (np.ndarray, np.generic)):
    a = np.asarray(x)
    put(f"array:{a.dtype.str}:{a.shape};")
    put(a.tobytes())
  elif isinstance(x, (tuple, list)):
    put(f"{type(x).__name__}[{len(x)}](")
    for y in x:
      rec(y)
    put(")")
  elif isinstance(x, dict):
    put(f"dict[{len(x)}](")
    for k in sorted(x, key=repr):
      rec(k)
      rec(x[k])
    put(")")
  elif isinstance(x, _JAXPR_TYPES):
    _jaxpr_fingerprint(x, out, depth + 1)
  elif isinstance(x, jax_core.Tracer):
    # a closure's dead tracer of the kernel trace: a body can read only its
    # type at lowering (its value is the lowering's operand)
    put(f"tracer:{_aval(x.aval)};")
  elif isinstance(x, jax.Array):  # a concrete constant
    rec(np.asarray(x))
  elif isinstance(x, jax_core.AbstractValue):
    put(f"aval:{_aval(x)};")
  elif dataclasses.is_dataclass(x):
    put(f"dataclass:{type(x).__module__}.{type(x).__qualname__}(")
    for f in dataclasses.fields(x):
      put(f"{f.name}=")
      rec(getattr(x, f.name))
    put(")")
  elif isinstance(x, _by_repr_types()):
    put(f"{type(x).__qualname__}:{_repr_without_address(x)};")
    if isinstance(x, jax.sharding.Mesh) and not x.empty:
      put(repr(np.asarray(x.device_ids).tolist()))
  elif type(x).__name__ == "PyTreeDef":
    put(f"treedef:{_repr_without_address(x)};")
  elif isinstance(x, _flat_tree_types()):
    put(f"flattree:{type(x).__qualname__}:{_repr_without_address(x)};")
  elif isinstance(x, functools.partial):
    put("partial(")
    rec(x.func)
    rec(x.args)
    rec(x.keywords)
    put(")")
  elif isinstance(x, types.FunctionType):
    put(f"function:{x.__module__}.{x.__qualname__}(")
    _code_fingerprint(x.__code__, out)
    rec(x.__defaults__)
    rec(x.__kwdefaults__)
    for cell in x.__closure__ or ():
      try:
        rec(cell.cell_contents)
      except ValueError:  # an empty cell
        put("empty;")
    put(")")
  elif isinstance(x, types.MethodType):
    put("method(")
    rec(x.__func__)
    rec(x.__self__)
    put(")")
  elif isinstance(x, types.BuiltinFunctionType):
    put(f"builtin:{x.__module__}.{x.__qualname__};")
  else:
    raise _Uncacheable(f"{type(x).__module__}.{type(x).__qualname__}")


@functools.cache
def _flat_tree_types() -> tuple[type, ...]:
  try:
    from jax._src import flattree
  except ImportError:
    return ()
  return (flattree.FlatTree,)


def _aval(a) -> str:
  return (f"{a.str_short()}:{getattr(a, 'weak_type', None)}:"
          f"{getattr(a, 'sharding', None)!r}:{getattr(a, 'memory_space', None)}")


def _code_fingerprint(code, out: list) -> None:
  out.append(f"code:{code.co_name}:{code.co_argcount}:{code.co_flags}:"
             f"{code.co_names!r}:{len(code.co_code)}:")
  out.append(code.co_code)
  for c in code.co_consts:
    if isinstance(c, types.CodeType):
      _code_fingerprint(c, out)
    else:
      out.append(f"{type(c).__name__}:{c!r};")


def _effect(e) -> str:
  """An effect by type and its input index or axis name (an effect's repr
  may carry a Var's id)."""
  name = f"{type(e).__module__}.{type(e).__qualname__}"
  if isinstance(getattr(e, "input_index", None), int):
    return f"{name}:{e.input_index}"
  if isinstance(getattr(e, "name", None), str):
    return f"{name}:{e.name}"
  r = repr(e)
  return name if _ADDRESS.search(r) else f"{name}:{r}"


def _jaxpr_fingerprint(j, out: list, depth: int) -> None:
  consts = getattr(j, "consts", None)
  if consts is not None:
    _fingerprint(list(consts), out, depth + 1)
  j = getattr(j, "jaxpr", j)  # (a ClosedJaxpr's Jaxpr; a Jaxpr is its own)
  ids: dict = {}

  def var(v):
    if isinstance(v, jax_core.Literal):
      out.append("literal:")
      _fingerprint(v.val, out, depth + 1)
      out.append(f"{_aval(v.aval)};")
    else:
      ids.setdefault(v, len(ids))
      out.append(f"v{ids[v]}:{_aval(v.aval)};")

  out.append("jaxpr(")
  for v in (*j.constvars, *j.invars):
    var(v)
  out.append(f"effects:{sorted(map(_effect, j.effects))};")
  for eqn in j.eqns:
    out.append(f"eqn:{eqn.primitive.name}(")
    for v in eqn.invars:
      var(v)
    out.append("->")
    for v in eqn.outvars:
      var(v)
    for k in sorted(eqn.params):
      out.append(f"{k}=")
      _fingerprint(eqn.params[k], out, depth + 1)
    out.append(")")
  for v in j.outvars:
    var(v)
  out.append(")")


@functools.cache
def _source_digest() -> str | None:
  """sha256 of the Python files the modules are lowered by (paths and
  contents): this package's, and JAX's Pallas Mosaic GPU lowering and
  Mosaic GPU's (so an edited JAX of one version number keys apart); None
  where they cannot be read (a zipped install): then no disk tier."""
  from jax._src.pallas import mosaic_gpu as pallas_mgpu
  from jax.experimental.mosaic import gpu as mgpu
  h = hashlib.sha256()
  for package in (pathlib.Path(__file__).resolve().parents[1],
                  pathlib.Path(pallas_mgpu.__file__).resolve().parent,
                  pathlib.Path(mgpu.__file__).resolve().parent):
    paths = sorted(package.rglob("*.py"))
    if not paths:
      return None
    for path in paths:
      h.update(str(path.relative_to(package.parent)).encode() + b"\0")
      h.update(path.read_bytes() + b"\0")
  return h.hexdigest()


def _arch() -> tuple[int, int]:
  """The GPU architecture Mosaic GPU lowers for (its own inference)."""
  from jax.experimental.mosaic.gpu import utils as mgpu_utils
  return tuple(mgpu_utils._infer_arch())  # pylint: disable=protected-access


def disk_key(mesh, jax_mesh, jaxpr, in_shapes, out_shapes, params):
  """The disk tier's key of one lowering (hex), or None where an argument
  cannot be described by its content."""
  out: list = [_FORMAT.decode(), f"jax {jax.__version__};",
               f"jaxlib {jaxlib.__version__};"]
  try:
    digest = _source_digest()
    if digest is None:
      return None
    out.append(f"src {digest}; arch {_arch()}; "
               f"name {getattr(jaxpr.debug_info, 'func_name', '')!r};")
    _fingerprint((mesh, jax_mesh, jaxpr, tuple(in_shapes), tuple(out_shapes),
                  params), out)
  except Exception:  # _Uncacheable, or a JAX without what this reads
    return None
  h = hashlib.sha256()
  for part in out:
    if isinstance(part, str):
      if _ADDRESS.search(part):  # (a last guard; _fingerprint checks reprs)
        return None
      part = part.encode()
    h.update(part)
  return h.hexdigest()


# ---------------------------------------------------------------- the disk


def cache_dir() -> str | None:
  """The disk tier's folder, or None when it is off."""
  env = os.environ.get(ENV, "")
  if env == "0":
    return None
  if env:
    return env
  jax_dir = jax.config.jax_compilation_cache_dir
  if not jax_dir or "://" in str(jax_dir):  # (local paths only)
    return None
  return os.path.join(str(jax_dir), "pallas_flash_modules")


def _load(folder: str, key: str):
  """(grid, block, bytecode) stored under ``key``, or None."""
  try:
    with open(os.path.join(folder, key), "rb") as f:
      data = f.read()
  except OSError:
    return None
  if not data.startswith(_FORMAT):
    return None
  header, _, raw = data[len(_FORMAT):].partition(b"\n")
  try:
    meta = json.loads(header)
    return tuple(meta["grid"]), tuple(meta["block"]), raw
  except (ValueError, KeyError, TypeError):
    return None


def _store(folder: str, key: str, result, raw: bytes, out_shapes) -> None:
  """Writes a lowering whose result the key's arguments determine (no
  profiler, no scratch, the out shapes as given), atomically; best effort."""
  if (result.profiler_spec is not None or result.gmem_scratch_shapes
      or tuple(result.new_out_shapes) != tuple(out_shapes)):
    return
  header = json.dumps({"grid": list(result.grid),
                       "block": list(result.block)}).encode()
  tmp = os.path.join(folder, f".{key}.{os.getpid()}.{threading.get_ident()}")
  try:
    os.makedirs(folder, exist_ok=True)
    with open(tmp, "wb") as f:  # (the umask's permissions, as JAX's cache)
      f.write(_FORMAT + header + b"\n" + raw)
    os.replace(tmp, os.path.join(folder, key))
  except OSError:
    with contextlib.suppress(OSError):
      os.remove(tmp)


def _result_from_disk(stored, out_shapes):
  from jax._src.pallas.mosaic_gpu import lowering
  grid, block, raw = stored
  return lowering.LoweringResult(
      module=ir.Module.parse(raw), grid=grid, block=block,
      new_out_shapes=tuple(out_shapes), profiler_spec=None,
      gmem_scratch_shapes=())


# --------------------------------------------------------------- the hook


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
    folder = cache_dir()
    dkey = (disk_key(mesh, jax_mesh, jaxpr, in_shapes, out_shapes, params)
            if folder else None)
    stored = _load(folder, dkey) if dkey else None
    result = None
    if stored is not None:
      try:
        result = _result_from_disk(stored, out_shapes)
        raw = stored[2]
        if not _stable_name(result.module, name):  # (dumps on since)
          result = None
      except Exception:  # a file that does not parse: lower afresh
        result = None
    if result is None:
      result = fresh()
      if not _stable_name(result.module, name):
        return result
      buf = io.BytesIO()
      result.module.operation.write_bytecode(buf)
      raw = buf.getvalue()
      if dkey:
        _store(folder, dkey, result, raw, out_shapes)
    with _lock:  # (the jaxpr and traceback are kept: their ids stay theirs)
      _cache[key] = (jaxpr, outer_traceback, raw,
                     dataclasses.replace(result, module=None))
      while len(_cache) > MAX_ENTRIES:
        _cache.popitem(last=False)
    return result
  lower_unpipelined_jaxpr_to_module.pallas_flash_memo = True
  return lower_unpipelined_jaxpr_to_module


def clear() -> None:
  """Empties the in-process tier (not the folder)."""
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
