"""Every exception class the packages define derives from ``SluiceError``, so a caller can catch
what Sluice raises on purpose with one class (the CLI prints it as one line).

Read from the source (no package is imported, so Spark, Dagster and great-expectations stay
out of this test): a class is an exception when a chain of bases, followed through the
packages' imports, ends at a built-in exception. Private classes (``_Name``) are signals a
module raises and catches itself (no other module may import them: ``test_import_graph``),
not errors a caller sees.
"""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

from tests.fixtures.processes import PROJECT

PACKAGES = ("pipelines", "quality", "orchestration", "assets")
ROOT = "pipelines.exceptions.SluiceError"


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _classes(root: Path, packages: tuple[str, ...]) -> dict[str, list[str]]:
    """Each class the packages define (``module.Name``) -> its bases, resolved to qualified
    names through the module's own classes and ``from ... import`` lines."""
    classes: dict[str, list[ast.expr]] = {}
    scopes: dict[str, dict[str, str]] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            module = _module_name(path, root)
            names = scopes.setdefault(module, {})
            package_name = module if path.name == "__init__.py" else module.rpartition(".")[0]
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom):
                    source = node.module or ""
                    if node.level:
                        base = package_name.rsplit(".", node.level - 1)[0]
                        source = f"{base}.{source}" if source else base
                    for alias in node.names:
                        names[alias.asname or alias.name] = f"{source}.{alias.name}"
            for node in ast.parse(path.read_text()).body:
                if isinstance(node, ast.ClassDef):
                    names[node.name] = f"{module}.{node.name}"
                    classes[f"{module}.{node.name}"] = node.bases
    return {
        qualified: [_resolve(base, scopes[qualified.rpartition(".")[0]]) for base in bases]
        for qualified, bases in classes.items()
    }


def _resolve(base: ast.expr, names: dict[str, str]) -> str:
    if isinstance(base, ast.Name):
        return names.get(base.id, f"builtins.{base.id}")
    return ast.unparse(base)


def _reexported(name: str, classes: dict[str, list[str]], root: Path) -> str:
    """``package.Name`` imported from the module that defines it: that module's class."""
    while name not in classes:
        module, _, attr = name.rpartition(".")
        init = root / Path(*module.split(".")) / "__init__.py"
        if not module or not init.exists():
            return name
        found = next(
            (
                f"{node.module}.{attr}"
                for node in ast.parse(init.read_text()).body
                if isinstance(node, ast.ImportFrom)
                and node.module
                and any((a.asname or a.name) == attr for a in node.names)
            ),
            None,
        )
        if found is None or found == name:
            return name
        name = found
    return name


def _ancestors(name: str, classes: dict[str, list[str]], root: Path) -> set[str]:
    seen: set[str] = set()
    todo = [name]
    while todo:
        current = _reexported(todo.pop(), classes, root)
        if current not in seen:
            seen.add(current)
            todo.extend(classes.get(current, []))
    return seen


def _is_builtin_exception(name: str) -> bool:
    module, _, attr = name.rpartition(".")
    found = getattr(builtins, attr, None) if module == "builtins" else None
    return isinstance(found, type) and issubclass(found, BaseException)


def exceptions_outside_the_root(
    root: Path = PROJECT, packages: tuple[str, ...] = PACKAGES, base: str = ROOT
) -> tuple[list[str], list[str]]:
    """The public exception classes the packages define, and those not under SluiceError."""
    classes = _classes(root, packages)
    found, outside = [], []
    for name in sorted(classes):
        ancestors = _ancestors(name, classes, root)
        if name.rpartition(".")[2].startswith("_") or name == base:
            continue
        if not any(_is_builtin_exception(a) for a in ancestors):
            continue
        found.append(name)
        if base not in ancestors:
            outside.append(name)
    return found, outside


def test_every_exception_the_packages_define_derives_from_sluice_error() -> None:
    found, outside = exceptions_outside_the_root()
    assert {"pipelines.exceptions.ConfigError", "pipelines.batch.exceptions.InvalidHour"} <= set(
        found
    ), found
    assert outside == [], f"not under SluiceError: {outside} (of {len(found)} found)"


def test_the_scan_follows_imports_and_finds_a_class_outside_the_root(tmp_path) -> None:
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "exceptions.py").write_text(
        "class SluiceError(Exception):\n    pass\n\nclass Bad(Exception):\n    pass\n"
    )
    (tmp_path / "pkg" / "sub" / "__init__.py").write_text("from pkg.sub.errors import Fine\n")
    (tmp_path / "pkg" / "sub" / "errors.py").write_text(
        "from ..exceptions import Bad, SluiceError\n\n"
        "class Fine(SluiceError, ValueError):\n    pass\n\n"
        "class AlsoBad(Bad):\n    pass\n\n"
        "class _Signal(Exception):\n    pass\n\n"
        "class NotAnError:\n    pass\n"
    )
    (tmp_path / "pkg" / "user.py").write_text(
        "from pkg.sub import Fine\n\nclass Finer(Fine):\n    pass\n"
    )
    found, outside = exceptions_outside_the_root(tmp_path, ("pkg",), "pkg.exceptions.SluiceError")
    assert found == [
        "pkg.exceptions.Bad",
        "pkg.sub.errors.AlsoBad",
        "pkg.sub.errors.Fine",
        "pkg.user.Finer",
    ]
    assert outside == ["pkg.exceptions.Bad", "pkg.sub.errors.AlsoBad"]
