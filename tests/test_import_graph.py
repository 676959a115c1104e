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


KIND_MODULES = (
    "pipelines/kinds/",
    "pipelines/views/model.py",
    "pipelines/stream/sessions.py",
    "pipelines/batch/sessions.py",
    "pipelines/serving/sessions.py",
    "quality/reconcile/sessions.py",
)
"""Where a view's kind may be told apart: the kinds themselves, the model that derives a
view's kind from its definition, and the session kind's own implementations (which check
that they were handed a session view)."""

_KIND_CLASSES = {"SessionSpec", "SessionState", "WindowState", "Windowed", "Sessions"}
_KIND_NAMES = {"WINDOW", "SESSION", "window", "session"}


def _asks_the_kind(test: ast.expr) -> bool:
    """Whether a condition tells kinds of view apart: ``is_session``, ``x.session is (not)
    None``, ``isinstance(x, SessionState)``, ``x.kind == SESSION``."""
    for node in ast.walk(test):
        if isinstance(node, ast.Attribute) and node.attr == "is_session":
            return True
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            names = {s.attr for s in sides if isinstance(s, ast.Attribute)}
            if "session" in names and any(
                isinstance(s, ast.Constant) and s.value is None for s in sides
            ):
                return True
            if "kind" in names and any(
                (isinstance(s, ast.Name) and s.id in _KIND_NAMES)
                or (isinstance(s, ast.Constant) and s.value in _KIND_NAMES)
                for s in sides
            ):
                return True
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "isinstance"
            and any(
                isinstance(n, ast.Name) and n.id in _KIND_CLASSES
                for arg in node.args[1:]
                for n in ast.walk(arg)
            )
        ):
            return True
    return False


def _kind_branches(root: Path, packages: tuple[str, ...], allowed: tuple[str, ...]) -> list[str]:
    """Branches (if, conditional expressions, comprehension filters, loops) that ask which
    kind a view is, outside ``allowed`` (paths relative to ``root``; a trailing / names a
    package)."""
    found = []
    for path in _modules(root, packages).values():
        where = path.relative_to(root).as_posix()
        if any(where.startswith(a) if a.endswith("/") else where == a for a in allowed):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.If | ast.IfExp | ast.While):
                tests = [node.test]
            elif isinstance(node, ast.comprehension):
                tests = list(node.ifs)
            elif isinstance(node, ast.Call):  # sum(v.is_session for v in views) and the like
                tests = [a for a in node.args if isinstance(a, ast.GeneratorExp)]
            else:
                continue
            found += [f"{where}:{t.lineno}" for t in tests if _asks_the_kind(t)][:1]
    return found


def test_no_module_outside_the_view_kinds_asks_which_kind_a_view_is() -> None:
    """Code that treats kinds of view differently asks the view's kind object
    (:mod:`pipelines.kinds`, :mod:`quality.reconcile.kinds`), so that a new kind is a new
    module, not a new branch in every layer; the benchmarks too, which keep their own
    registries by the kind's name."""
    assert _kind_branches(PROJECT, (*PACKAGES, "benchmarks"), KIND_MODULES) == []


def test_the_kind_check_finds_each_way_of_asking(tmp_path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text(
        "def f(view, views, state):\n"
        "    if view.is_session:\n"  # 2
        "        pass\n"
        "    x = 1 if view.session is not None else 2\n"  # 4
        "    y = [v for v in views if v.session is None]\n"  # 5
        "    if isinstance(state, SessionState):\n"  # 6
        "        pass\n"
        "    while view.kind == SESSION:\n"  # 8
        "        break\n"
        "    n = sum(v.is_session for v in views)\n"  # 10
        "    assert view.session is not None\n"
        "    if view.kind_of is None or view.disabled:\n"
        "        pass\n"
    )
    (package / "b.py").write_text("def g(view):\n    return 1 if view.is_session else 2\n")
    found = _kind_branches(tmp_path, ("pkg",), ("pkg/b.py",))
    assert sorted(found, key=lambda f: int(f.split(":")[1])) == [
        f"pkg/a.py:{n}" for n in (2, 4, 5, 6, 8, 10)
    ]
