"""The import graph inside each package: no cycles between sibling modules, no private names
imported across modules.

Every import counts, those inside functions too: they are how the session modules and the
modules they extended imported each other without failing at import time, a cycle the
layers contract (import-linter, run before the tests) cannot see.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.fixtures.processes import PROJECT

PACKAGES = ("pipelines", "quality", "orchestration", "assets")


def _modules(root: Path = PROJECT, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    found = {}
    for package in packages:
        for path in (root / package).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def _imports(modules: dict[str, Path]) -> tuple[dict[str, set[str]], list[str]]:
    """Edges module -> imported project module, and ``from x import _private`` across modules."""
    edges: dict[str, set[str]] = {}
    private = []
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    source = node.module or ""
                for alias in node.names:
                    target = f"{source}.{alias.name}"
                    target = target if target in modules else source
                    if target not in modules or target == name:
                        continue
                    edges.setdefault(name, set()).add(target)
                    if (
                        target == source
                        and alias.name.startswith("_")
                        and not alias.name.startswith("__")
                    ):
                        private.append(f"{name} imports {source}.{alias.name}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in modules and alias.name != name:
                        edges.setdefault(name, set()).add(alias.name)
    return edges, private


def _sibling_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of modules of one package (Tarjan), larger than one."""
    parent = {m: m.rpartition(".")[0] for m in {*edges, *(t for ts in edges.values() for t in ts)}}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, ()):
            if parent[w] != parent[v]:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for v in sorted(parent):
        if v not in index:
            visit(v)
    return cycles


def test_no_cycles_between_modules_of_a_package() -> None:
    edges, _ = _imports(_modules())
    assert _sibling_cycles(edges) == []


def test_no_private_names_imported_across_modules() -> None:
    _, private = _imports(_modules())
    assert private == []


def test_the_check_finds_a_cycle_closed_inside_a_function_and_a_private_import(tmp_path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.b import helper\n")
    (package / "b.py").write_text("def helper():\n    from pkg.a import _secret\n")
    (package / "c.py").write_text("import pkg.a\n")
    edges, private = _imports(_modules(tmp_path, ("pkg",)))
    assert _sibling_cycles(edges) == [["pkg.a", "pkg.b"]]
    assert private == ["pkg.b imports pkg.a._secret"]
