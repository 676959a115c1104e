"""What `sluice up` produces to its topic: the generator's trace, or a file of one's own events.

With ``--views FILE`` whose views read a topic the file declares itself, `up` runs on that
topic: the agents, Dagster and the replay all use it. ``--replay EVENTS`` produces a JSON Lines,
CSV or Parquet file to it with `sluice replay`, paced by the declared event time; the
generator's trace is replayed only to a topic declared as the generator's events.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from pipelines.events.declaration import TopicDeclaration
from pipelines.exceptions import SluiceError
from pipelines.generator.file_replay import TimeField, format_of, read_rows, time_span
from pipelines.views.model import View
from pipelines.views.topics import ANY_TOPIC, declaration_for, default_declarations

__all__ = [
    "file_span",
    "hours_span",
    "reads_generator_events",
    "replay_command",
    "topic_declaration",
    "up_topic",
]

HOUR_S = 3600
DAY_S = 24 * HOUR_S
PARTITION_FORMAT = "%Y-%m-%d-%H:%M"


def up_topic(views: list[View], configured: str, chosen: bool) -> str:
    """The topic `up` runs on: ``configured`` (``SLUICE_TOPIC``) if a view reads it or the user
    set it, else the one topic the views read; raises :class:`SluiceError` when they read
    several and none is chosen."""
    topics = sorted({v.topic for v in views})
    if chosen or configured in topics or not topics:
        return configured
    if len(topics) == 1:
        return topics[0]
    raise SluiceError(
        f"the views read {len(topics)} topics ({', '.join(topics)}); `up` runs one: "
        "choose it with SLUICE_TOPIC"
    )


def topic_declaration(views: list[View], topic: str) -> TopicDeclaration:
    """How ``topic``'s messages read: the declaration its views carry, else the topics file's."""
    for view in views:
        if view.topic == topic and view.declaration is not None:
            return view.declaration
    return declaration_for(topic, default_declarations())


def reads_generator_events(declaration: TopicDeclaration) -> bool:
    """Whether ``declaration`` is the topics file's ``"*"`` (the generator's events): only
    then does replaying the generator's trace to the topic make sense."""
    generator = default_declarations().get(ANY_TOPIC)
    return generator is not None and declaration.model_copy(update={"topic": ANY_TOPIC}) == (
        generator
    )


def hours_span(first_s: float, end_s: float) -> tuple[str, str]:
    """Hourly partitions from the start of ``first_s``'s day through the hour that ends the
    covered time ``[first_s, end_s)``, as ``SLUICE_PARTITIONS_START`` / ``_END`` values (the
    end exclusive; at least one hour)."""
    start = first_s - first_s % DAY_S
    end = end_s - end_s % HOUR_S + (HOUR_S if end_s % HOUR_S else 0)
    return (
        time.strftime(PARTITION_FORMAT, time.gmtime(start)),
        time.strftime(PARTITION_FORMAT, time.gmtime(max(end, start + HOUR_S))),
    )


def _time_field(declaration: TopicDeclaration) -> TimeField | None:
    et = declaration.event_time
    if et.source != "field":
        return None
    return TimeField(et.path or "event_time", et.format, et.pattern, et.zone)


def file_span(path: Path, declaration: TopicDeclaration) -> tuple[str, str] | None:
    """The hourly partitions a file of events covers (by its declared event time); None when
    its time is the record's (known only once produced) or no row has a readable time."""
    field = _time_field(declaration)
    if field is None:
        return None
    try:
        span = time_span(read_rows(path, format_of(path), declaration), field)
    except (OSError, EOFError, ValueError) as exc:
        raise SluiceError(f"cannot read {path}: {exc}") from exc
    if span is None:
        return None
    return hours_span(span[0] / 1000, span[1] / 1000 + 1e-3)


def replay_command(
    path: Path,
    topic: str,
    views_file: str | None,
    declaration: TopicDeclaration,
    speedup: float,
    progress_file: Path,
) -> list[str]:
    """`sluice replay` of ``path`` to ``topic``, paced at ``speedup`` by the declared event time
    (as fast as the broker takes it when the time is the record's own)."""
    cmd = [sys.executable, "-m", "orchestration.cli", "replay", str(path), "--topic", topic]
    cmd += ["--progress", str(progress_file)]
    if views_file is not None:
        cmd += ["--views", str(views_file)]
    field = _time_field(declaration)
    if field is None:
        return [*cmd, "--as-fast-as-possible"]
    cmd += ["--speedup", f"{speedup:g}", "--time-field", field.path]
    cmd += ["--time-format", field.format.value]
    if field.pattern is not None:
        cmd += ["--time-pattern", field.pattern]
    return cmd
