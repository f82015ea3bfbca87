"""The package's import structure, read from the source (no module is run):
no import circle, and no module uses another module's ``_private`` name.

An import is an edge to the module it names: ``from pallas_flash import
masks`` and ``from pallas_flash.masks import MaskSpec`` both to
``pallas_flash.masks``, wherever the statement sits (lazy imports in a
function count).  Python also runs a package's ``__init__`` before its
submodules; those files only re-export, so the parent packages of a named
module are not edges of their own (the usual model of cycle checkers).

A module whose name starts with ``_`` (``_dispatch``, ``_vjp``) is private to
the package, not to a module: its public names are the package's internal
interface.
"""
from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1] / "pallas_flash"


def _modules(root: pathlib.Path = ROOT) -> dict[str, pathlib.Path]:
  out = {}
  for path in sorted(root.rglob("*.py")):
    parts = path.relative_to(root.parent).with_suffix("").parts
    if parts[-1] == "__init__":
      parts = parts[:-1]
    out[".".join(parts)] = path
  return out


MODULES = _modules()


def _private(name: str) -> bool:
  return name.startswith("_") and not name.startswith("__")


def _imports(name: str, path: pathlib.Path, modules=MODULES):
  """Yields (imported module, bound alias or None, imported attribute or
  None) for each import of a module of ``modules`` (the package's)."""
  is_package = path.name == "__init__.py"
  for node in ast.walk(ast.parse(path.read_text(), str(path))):
    if isinstance(node, ast.Import):
      for alias in node.names:
        if alias.name in modules:
          yield alias.name, alias.asname, None
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:  # relative: resolve against this module's package
        package = name.split(".")
        package = package[:len(package) - node.level + is_package]
        base = ".".join(package + ([base] if base else []))
      for alias in node.names:
        sub = f"{base}.{alias.name}"
        if sub in modules:  # a submodule: ``from pallas_flash import masks``
          yield sub, alias.asname or alias.name, None
        elif base in modules:
          yield base, None, alias.name


def _graph() -> dict[str, set[str]]:
  return {name: {target for target, _, _ in _imports(name, path)}
          for name, path in MODULES.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
  """One import circle of ``graph`` (its modules in order), or None."""
  state, stack = {}, []

  def visit(node):
    state[node] = "open"
    stack.append(node)
    for target in sorted(graph[node]):
      if state.get(target) == "open":
        return stack[stack.index(target):] + [target]
      if target not in state:
        found = visit(target)
        if found:
          return found
    stack.pop()
    state[node] = "done"
    return None

  for node in sorted(graph):
    if node not in state:
      found = visit(node)
      if found:
        return found
  return None


def _private_uses(modules=MODULES) -> set[tuple[str, str, str]]:
  """(module, other module, name) for each use of another module's private
  name: ``from other import _name`` or ``other_alias._name``."""
  uses = set()
  for name, path in modules.items():
    aliases = {}
    for target, alias, attr in _imports(name, path, modules):
      if attr is not None and _private(attr):
        uses.add((name, target, attr))
      if alias is not None:
        aliases[alias] = target
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
      if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
          and node.value.id in aliases and _private(node.attr)
          and f"{aliases[node.value.id]}.{node.attr}" not in modules):
        uses.add((name, aliases[node.value.id], node.attr))
  return {u for u in uses if u[0] != u[1]}


def test_the_graph_sees_the_package():
  graph = _graph()
  assert "pallas_flash._dispatch" in graph["pallas_flash.api"]
  assert "pallas_flash.mosaic.forward" in graph["pallas_flash._dispatch"]
  assert "pallas_flash.masks" in graph["pallas_flash.ring"]


def test_no_import_circle():
  cycle = _cycle(_graph())
  assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_no_module_uses_another_modules_private_names():
  uses = sorted(_private_uses())
  assert not uses, f"private names used across modules: {uses}"


def test_the_check_finds_a_circle_and_a_private_use(tmp_path):
  assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
  assert _cycle({"a": {"b"}, "b": set()}) is None
  pkg = tmp_path / "pkg"
  (pkg / "sub").mkdir(parents=True)
  (pkg / "__init__.py").write_text("")
  (pkg / "_shared.py").write_text("PUBLIC = 1\n_HIDDEN = 2\n")
  (pkg / "sub" / "__init__.py").write_text("")
  (pkg / "sub" / "a.py").write_text(
      "_own = _lazy = 1\nPUBLIC = 2\n\ndef _helper():\n  return _own\n")
  (pkg / "sub" / "b.py").write_text(
      "from pkg.sub import a as other\n"
      "from pkg.sub.a import PUBLIC, _helper\n"  # imported by name
      "from . import a\n"
      "from pkg import _shared\n"  # a private module: the package's
      "\n"
      "def f():\n"
      "  from .a import _lazy as mine\n"  # relative, lazy, renamed
      "  return (other._own, a.PUBLIC, a.__name__, _shared.PUBLIC,\n"
      "          _shared._HIDDEN, mine)\n")
  (pkg / "sub" / "c.py").write_text("_x = 1\nfrom pkg.sub import a\n"
                                    "y = a.PUBLIC + _x\n")
  modules = _modules(pkg)
  assert set(modules) == {"pkg", "pkg._shared", "pkg.sub", "pkg.sub.a",
                          "pkg.sub.b", "pkg.sub.c"}
  assert _private_uses(modules) == {
      ("pkg.sub.b", "pkg.sub.a", "_helper"),
      ("pkg.sub.b", "pkg.sub.a", "_own"),
      ("pkg.sub.b", "pkg.sub.a", "_lazy"),
      ("pkg.sub.b", "pkg._shared", "_HIDDEN"),
  }
