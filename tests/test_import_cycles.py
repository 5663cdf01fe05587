"""No module of genloop imports itself back through others, lazily or not (#43): a cycle
hidden by an import inside a function still ties the two modules into one.

The walk reads every module's import statements (``ast``; nothing is imported), resolves each
to the genloop module it names, and looks for strongly connected components. Imports under
``if TYPE_CHECKING:`` never run and are left out.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The repository's code folders and the packages they are published as.
FOLDERS = {folder: package for package, folder in tomllib.loads(
    (ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].items()}


def _modules() -> dict[str, Path]:
    found = {}
    for folder, package in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


def _runtime_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    typing_only = {id(n) for node in ast.walk(tree)
                   if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                   for stmt in node.body for n in ast.walk(stmt)}
    return [n for n in ast.walk(tree)
            if isinstance(n, ast.Import | ast.ImportFrom) and id(n) not in typing_only]


def _imported(name: str, path: Path, node: ast.Import | ast.ImportFrom,
              modules: dict[str, Path]) -> set[str]:
    """The genloop modules ``node`` (in module ``name``) imports: ``from package import
    module`` names the module, not the package."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
            base = ".".join(here[:len(here) - node.level + 1] + ([base] if base else []))
        subs = [f"{base}.{alias.name}" for alias in node.names]
        names = [s for s in subs if s in modules]
        if len(names) < len(subs):  # the others are names defined in ``base``
            names.append(base)
    found = set()
    for target in names:
        while target and target not in modules:  # an attribute of a module: that module
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def _edges(name: str, path: Path, source: str, modules: dict[str, Path]) -> set[str]:
    return set().union(*(_imported(name, path, node, modules)
                         for node in _runtime_imports(ast.parse(source))))


def test_no_module_imports_itself_back_through_others():
    modules = _modules()
    graph = {name: _edges(name, path, path.read_text(), modules)
             for name, path in modules.items()}
    assert len(graph) > 100
    assert "genloop.workers.stores.base" in graph["genloop.workers.runtime.scheduler"]
    assert _cycles(graph) == []


def test_an_import_inside_a_function_counts_and_one_for_type_checkers_does_not():
    modules = {f"p.{m}": Path(f"p/{m}.py") for m in "abcd"}
    source = ("from typing import TYPE_CHECKING\nfrom . import d\nif TYPE_CHECKING:\n"
              "    from .b import B\ndef f():\n    from .c import g\n")
    assert _edges("p.a", modules["p.a"], source, modules) == {"p.c", "p.d"}


def test_the_walk_finds_every_cycle_and_only_those():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a", "e"}, "e": {"d"}, "f": {"a"}}
    assert sorted(_cycles(graph)) == [["a", "b", "c"], ["d", "e"]]
