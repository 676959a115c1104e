"""Which declaration each view's topic has (:mod:`pipelines.events.declaration`).

A views file may declare its topics under ``topics:``; the topics file (``SLUICE_TOPICS_FILE``,
``data/topics.yaml`` by default) declares the rest. A view's topic takes the views file's
declaration, else the topics file's declaration of that topic, else the topics file's ``"*"``
(the declaration of any topic declared nowhere else).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from pipelines.events.declaration import TopicDeclaration
from pipelines.exceptions import ViewDefinitionError
from pipelines.views.problems import Problem

__all__ = ["ANY_TOPIC", "declaration_for", "load_declarations", "read_declarations"]

ANY_TOPIC = "*"
"""The topic of the declaration that holds for any topic declared nowhere else."""


def read_declarations(
    document: Any, where: str = "topics"
) -> tuple[dict[str, TopicDeclaration], list[Problem]]:
    """The declarations under ``topics:`` of ``document`` (none without the key), by topic,
    and every problem of them, each with its path (``topics[0].fields[2].type``)."""
    raw = document.get("topics") if isinstance(document, Mapping) else None
    if raw is None:
        return {}, []
    if not isinstance(raw, list):
        return {}, [Problem(where, "expected a list of topic declarations")]
    found: dict[str, TopicDeclaration] = {}
    problems: list[Problem] = []
    for i, item in enumerate(raw):
        try:
            declaration = TopicDeclaration.model_validate(item)
        except ValidationError as exc:
            for error in exc.errors():
                path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error["loc"])
                problems.append(Problem(f"{where}[{i}]{path}", error["msg"]))
            continue
        if declaration.topic in found:
            problems.append(Problem(f"{where}[{i}].topic", f"{declaration.topic!r} declared twice"))
        found[declaration.topic] = declaration
    return found, problems


def load_declarations(path: str | Path) -> dict[str, TopicDeclaration]:
    """The declarations of a topics file, read again when it changes."""
    path = Path(path)
    try:
        stamp = path.stat().st_mtime_ns
    except OSError as exc:
        raise ViewDefinitionError(f"cannot read topic declarations {path}: {exc}") from exc
    return _load(path, stamp)


@functools.lru_cache(maxsize=8)
def _load(path: Path, stamp: int) -> dict[str, TopicDeclaration]:
    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ViewDefinitionError(f"cannot read topic declarations {path}: {exc}") from exc
    found, problems = read_declarations(document)
    if problems:
        raise ViewDefinitionError("\n".join(p.line(str(path)) for p in problems))
    return found


def declaration_for(
    topic: str,
    own: Mapping[str, TopicDeclaration],
    shared: Mapping[str, TopicDeclaration],
) -> TopicDeclaration | None:
    """The views file's declaration of ``topic``, else the topics file's, else its ``"*"``."""
    for declarations in (own, shared):
        if topic in declarations:
            return declarations[topic]
    return shared.get(ANY_TOPIC)
