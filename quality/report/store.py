"""Writing a day's report under the storage root (keys: :func:`pipelines.segments.report_keys`:
the HTML page with its plots embedded, the Markdown summary Dagster shows inline, and the JSON
numbers behind both).

Writes go through the :class:`ObjectStore`, so they are atomic locally and on S3.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from pathlib import Path

from pipelines.segments import report_keys
from pipelines.storage import LocalObjectStore, ObjectStore

__all__ = ["StoredReport", "report_location", "write_report"]


def report_location(store: ObjectStore, key: str) -> tuple[Path | None, str]:
    """(local path when the store is a directory, else None; a URI to open the object)."""
    if isinstance(store, LocalObjectStore):
        path = Path(store.uri(key))
        return path, path.as_uri()
    return None, store.uri(key)


@dataclass(frozen=True)
class StoredReport:
    """Where a report was written."""

    day: date
    keys: dict[str, str]
    html_path: Path | None
    """Local file of the HTML page; None on S3."""
    html_uri: str
    """``file://...`` locally, ``s3://...`` otherwise."""
    markdown: str

    @property
    def html_location(self) -> str:
        return str(self.html_path) if self.html_path else self.html_uri


def write_report(
    store: ObjectStore, day: date, html: str, markdown: str, document: str
) -> StoredReport:
    """Write the three files of ``day``'s report, replacing an earlier run's."""
    keys = report_keys(day)
    store.put(keys["html"], html.encode("utf-8"))
    store.put(keys["md"], markdown.encode("utf-8"))
    store.put(keys["json"], document.encode("utf-8"))
    path, uri = report_location(store, keys["html"])
    return StoredReport(day, keys, path, uri, markdown)
