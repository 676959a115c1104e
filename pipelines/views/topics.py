"""Which declaration each view's topic reads with: the views file's own, then the topics file's.

A views file may declare topics under ``topics:`` beside ``views:``; the settings' topics file
(``SLUICE_TOPICS_FILE``, ``data/topics.yaml``) declares the rest, and its ``topic: "*"`` any
topic declared nowhere else. A topic declared nowhere is a mistake of the view that reads it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import ValidationError

from pipelines.events.avro_declaration import resolve_avro
from pipelines.events.declaration import TopicDeclaration
from pipelines.exceptions import SchemaRegistryUnreachable, ViewDefinitionError

if TYPE_CHECKING:
    from pipelines.views.model import View

__all__ = [
    "ANY_TOPIC",
    "check_declarations",
    "declaration_for",
    "declaration_of",
    "declarations_beside",
    "declarations_of",
    "default_declarations",
    "directory_of",
    "load_declarations",
]

ANY_TOPIC = "*"
"""The topic name of the declaration of every topic declared nowhere else."""


def check_declarations(
    raw: Any, base: Path | None = None
) -> tuple[dict[str, TopicDeclaration], list[tuple[str, str]]]:
    """The declarations of a ``topics:`` list and its problems as (path, message), paths such as
    ``topics[0].fields[2].type``. An Avro topic's is resolved (:func:`resolve_avro`): its
    schema file relative to ``base`` (the declaring file's directory), its fields from its
    schema when it declares none."""
    if raw is None:
        return {}, []
    if not isinstance(raw, list):
        return {}, [("topics", "expected a list of topic declarations")]
    found: dict[str, TopicDeclaration] = {}
    problems: list[tuple[str, str]] = []
    for i, item in enumerate(raw):
        try:
            declaration = TopicDeclaration.model_validate(item)
        except ValidationError as exc:
            for detail in exc.errors():
                path = "".join(
                    f"[{part}]" if isinstance(part, int) else f".{part}" for part in detail["loc"]
                )
                problems.append((f"topics[{i}]{path}", detail["msg"]))
            continue
        if (
            declaration.topic == ANY_TOPIC
            and declaration.encoding == "avro"
            and not (declaration.fields or declaration.schema_file)
        ):
            problems.append(
                (
                    f"topics[{i}].fields",
                    f'topic "{ANY_TOPIC}" has no subject of its own in the schema registry: '
                    "declare its fields or a schema_file",
                )
            )
            continue
        try:
            declaration = resolve_avro(declaration, base, _registry)
        except (ValueError, SchemaRegistryUnreachable) as exc:
            where = "schema_file" if declaration.schema_file is not None else "encoding"
            problems.append((f"topics[{i}].{where}", _said(exc)))
            continue
        if declaration.topic in found:
            problems.append((f"topics[{i}].topic", f"topic {declaration.topic!r} declared twice"))
        found[declaration.topic] = declaration
    return found, problems


def _registry() -> dict[str, Any] | None:
    from pipelines.config import get_settings

    return get_settings().schema_registry_conf()


def _said(exc: Exception) -> str:
    if isinstance(exc, ValidationError):  # the fields read from the schema do not validate
        return "; ".join(str(e["msg"]) for e in exc.errors())
    return str(exc)


def load_declarations(path: str | Path) -> dict[str, TopicDeclaration]:
    """The declarations of a topics file (``topics:``), by topic; raises
    :class:`ViewDefinitionError` listing every mistake."""
    path = Path(path)
    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ViewDefinitionError(f"cannot read topic declarations {path}: {exc}") from exc
    raw = document.get("topics") if isinstance(document, Mapping) else document
    found, problems = check_declarations(raw, path.parent)
    if problems:
        raise ViewDefinitionError("\n".join(f"{path}: {where}: {msg}" for where, msg in problems))
    return found


@lru_cache(maxsize=4)
def _cached(path: str, mtime_ns: int) -> dict[str, TopicDeclaration]:
    return load_declarations(path)


def default_declarations() -> dict[str, TopicDeclaration]:
    """The settings' topics file's declarations (read again when the file changes)."""
    from pipelines.config import get_settings

    path = Path(get_settings().topics_file)
    try:
        mtime = path.stat().st_mtime_ns
    except OSError as exc:
        raise ViewDefinitionError(f"cannot read topic declarations {path}: {exc}") from exc
    return _cached(str(path), mtime)


def declaration_for(topic: str, declarations: Mapping[str, TopicDeclaration]) -> TopicDeclaration:
    """``topic``'s declaration: its own, else ``"*"``'s (renamed to ``topic``); raises
    :class:`ViewDefinitionError` naming the topic and where to declare it."""
    found = declarations.get(topic)
    if found is not None:
        return found
    anything = declarations.get(ANY_TOPIC)
    if anything is None:
        raise ViewDefinitionError(
            f"topic {topic!r} is declared nowhere: declare it under topics: in the views file "
            "or in the topics file (SLUICE_TOPICS_FILE)"
        )
    return anything.model_copy(update={"topic": topic})


def declaration_of(view: View) -> TopicDeclaration:
    """How ``view``'s topic reads: the view's declaration, else (a view built by hand, not by
    the loader) the topics file's declaration of its topic."""
    if view.declaration is not None:
        return view.declaration
    return declaration_for(view.topic, default_declarations())


def declarations_beside(document: Any, source: str = "views") -> dict[str, TopicDeclaration]:
    """What a views document's views read with: its own ``topics:`` over the topics file's;
    raises :class:`ViewDefinitionError` listing the mistakes of its ``topics:``."""
    raw = document.get("topics") if isinstance(document, Mapping) else None
    own, problems = check_declarations(raw, directory_of(source))
    if problems:
        raise ViewDefinitionError("\n".join(f"{source}: {where}: {msg}" for where, msg in problems))
    return {**default_declarations(), **own}


def directory_of(source: str) -> Path | None:
    """The directory of the file ``source`` names (None: ``source`` is no file)."""
    path = Path(source)
    return path.parent if path.is_file() else None


def declarations_of(views: Iterable[View]) -> list[dict[str, Any]]:
    """The declarations of ``views``' topics as JSON, once each: what a request carries so that
    whoever parses the views needs no topics file of its own."""
    found = {v.topic: v.declaration for v in views if v.declaration is not None}
    return [d.model_dump(mode="json") for d in found.values()]
