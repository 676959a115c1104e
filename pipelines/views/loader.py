"""Load view definitions from YAML and report every mistake of a file at once, each with its path.

Config never executes code: YAML is read with ``safe_load``, and the definitions are checked
against the event schema and the aggregator registry by the models of
:mod:`pipelines.views.definitions` before any worker uses them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from pipelines.events.declaration import TopicDeclaration
from pipelines.exceptions import UnknownAggregation, ViewDefinitionError
from pipelines.views.definitions import ViewsFile
from pipelines.views.fields import DECLARATIONS, is_name, parse_duration
from pipelines.views.model import View
from pipelines.views.problems import Problem, describe
from pipelines.views.topics import check_declarations, default_declarations, directory_of

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


def load_views(
    path: str | Path, topics: Mapping[str, TopicDeclaration] | None = None
) -> list[View]:
    return parse_views(read_views_document(path), source=str(Path(path)), topics=topics)


def parse_views(
    document: Any, source: str = "views", topics: Mapping[str, TopicDeclaration] | None = None
) -> list[View]:
    """The views of ``document`` (``{"views": [...]}`` or the list itself); raises
    :class:`ViewDefinitionError` listing every mistake, one per line (:class:`UnknownAggregation`
    when one of them is an unknown aggregation). ``topics``: the declarations beside the
    document's own (default: the settings' topics file)."""
    views, problems = check_views(document, topics, directory_of(source))
    if problems:
        lines = "\n".join(p.line(source) for p in problems)
        if any(p.unknown_aggregation for p in problems):
            raise UnknownAggregation(lines)
        raise ViewDefinitionError(lines)
    return views


def check_views(
    document: Any, topics: Mapping[str, TopicDeclaration] | None = None, base: Path | None = None
) -> tuple[list[View], list[Problem]]:
    """Every view of ``document``, each with its topic's declaration, and every problem of it
    and of its ``topics:`` (no views when there is one). ``topics``: the declarations beside
    the document's own (default: the settings' topics file's); ``base``: the directory an
    Avro topic's schema file is relative to."""
    raw = document.get("views") if isinstance(document, Mapping) else document
    if not isinstance(raw, list) or not raw:
        return [], [Problem("", "expected a non-empty list under 'views:'")]
    own, wrong = check_declarations(
        document.get("topics") if isinstance(document, Mapping) else None, base
    )
    declarations = {**(default_declarations() if topics is None else topics), **own}
    context = {DECLARATIONS: declarations}
    try:
        views = ViewsFile.model_validate({"views": raw}, context=context).to_views(declarations)
        problems = []
    except ValidationError as exc:
        views, problems = [], describe(exc, raw)
    problems = [Problem(where, message) for where, message in wrong] + problems
    problems += _duplicates(raw)
    return ([] if problems else views), problems


def _duplicates(raw: list[Any]) -> list[Problem]:
    """Each view name used more than once, once."""
    names = [item.get("name") for item in raw if isinstance(item, Mapping)]
    repeated = [n for i, n in enumerate(names) if is_name(n) and n in names[:i]]
    return [Problem("", f"duplicate view name {n!r}") for n in dict.fromkeys(repeated)]
