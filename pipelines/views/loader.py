"""Load view definitions from YAML and report every mistake of a file at once, each with its path.

Config never executes code: YAML is read with ``safe_load``, and the definitions are checked
against the event schema and the aggregator registry by the models of
:mod:`pipelines.views.definitions` before any worker uses them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from pipelines.archive.declared import unsupported
from pipelines.events.declaration import TopicDeclaration
from pipelines.exceptions import UnknownAggregation, ViewDefinitionError
from pipelines.views.definitions import ViewsFile
from pipelines.views.fields import is_name, parse_duration
from pipelines.views.model import View
from pipelines.views.problems import Problem, describe
from pipelines.views.topics import declaration_for, load_declarations, read_declarations

__all__ = ["check_views", "load_views", "parse_duration", "parse_views", "read_views_document"]


def read_views_document(path: str | Path) -> Any:
    """The YAML document of a views file (``safe_load``: no tag runs code)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ViewDefinitionError(f"cannot read view definitions {path}: {exc}") from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ViewDefinitionError(f"{path}: not valid YAML: {exc}") from exc


def load_views(path: str | Path) -> list[View]:
    return parse_views(read_views_document(path), source=str(Path(path)))


def parse_views(document: Any, source: str = "views") -> list[View]:
    """The views of ``document`` (``{"views": [...]}`` or the list itself); raises
    :class:`ViewDefinitionError` listing every mistake, one per line (:class:`UnknownAggregation`
    when one of them is an unknown aggregation)."""
    views, problems = check_views(document)
    if problems:
        lines = "\n".join(p.line(source) for p in problems)
        if any(p.unknown_aggregation for p in problems):
            raise UnknownAggregation(lines)
        raise ViewDefinitionError(lines)
    return views


def check_views(document: Any) -> tuple[list[View], list[Problem]]:
    """Every view of ``document`` and every problem of it (no views when there is one); each
    view carries its topic's declaration (:mod:`pipelines.views.topics`)."""
    raw = document.get("views") if isinstance(document, Mapping) else document
    if not isinstance(raw, list) or not raw:
        return [], [Problem("", "expected a non-empty list under 'views:'")]
    own, problems = read_declarations(document)
    try:
        views = ViewsFile.model_validate({"views": raw}).to_views()
    except ValidationError as exc:
        views = []
        problems += describe(exc, raw)
    problems += _duplicates(raw)
    if problems:
        return [], problems
    return _declared(views, own)


def _declared(
    views: list[View], own: Mapping[str, TopicDeclaration]
) -> tuple[list[View], list[Problem]]:
    from pipelines.config import get_settings  # the topics file is a setting of the edge's

    topics_file = get_settings().topics_file
    try:
        shared = {} if {v.topic for v in views} <= own.keys() else load_declarations(topics_file)
    except ViewDefinitionError as exc:
        return [], [Problem("", str(exc))]
    declared, problems = [], []
    for i, view in enumerate(views):
        declaration = declaration_for(view.topic, own, shared)
        if declaration is None:
            problems.append(
                Problem(
                    f"views[{i}] ({view.name}).topic",
                    f"topic {view.topic!r} is not declared: declare it under topics: in this "
                    f"file or in {topics_file} (SLUICE_TOPICS_FILE)",
                )
            )
        else:
            problems += [
                Problem(f"views[{i}] ({view.name}).topic", f"topic {view.topic!r}: {why}")
                for why in unsupported(declaration)
            ]
        declared.append(dataclasses.replace(view, declaration=declaration))
    return ([] if problems else declared), problems


def _duplicates(raw: list[Any]) -> list[Problem]:
    """Each view name used more than once, once."""
    names = [item.get("name") for item in raw if isinstance(item, Mapping)]
    repeated = [n for i, n in enumerate(names) if is_name(n) and n in names[:i]]
    return [Problem("", f"duplicate view name {n!r}") for n in dict.fromkeys(repeated)]
