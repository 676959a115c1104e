"""The layout stores had before the views' tables, read only by ``sluice tables migrate``
(:mod:`pipelines.serving.migrate`)::

    segments/<view>/<segment>/batch/v<version>/part-*.parquet   a correction's values
    segments/<view>/<segment>/_published.json                   which version was served

The manifest was written last, after the version's files, so it never names a version whose
files are not there. Nothing else in Sluice reads or writes these keys.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, ValidationError

from pipelines.exceptions import SluiceError
from pipelines.segments import segment_prefix
from pipelines.storage import ObjectStore

__all__ = [
    "ManifestError",
    "PublishedManifest",
    "batch_dir",
    "batch_prefix",
    "published_key",
    "read_manifest",
    "write_manifest",
]


def batch_dir(view: str, segment_start_ms: int) -> str:
    """Every batch version of a segment."""
    return f"{segment_prefix(view, segment_start_ms)}batch/"


def batch_prefix(view: str, segment_start_ms: int, version: int) -> str:
    return f"{batch_dir(view, segment_start_ms)}v{version}/"


def published_key(view: str, segment_start_ms: int) -> str:
    return f"{segment_prefix(view, segment_start_ms)}_published.json"


class ManifestError(SluiceError, ValueError):
    """A ``_published.json`` that is not a manifest (truncated, edited by hand)."""


class PublishedManifest(BaseModel):
    """The newest published batch version of one segment."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    version: int
    files: tuple[str, ...]
    kind: str = "batch"
    created_at: int = 0
    """Unix seconds of the publish."""
    events: int = 0
    """Distinct events the version was computed from."""
    duplicates_dropped: int = 0
    hours: tuple[str, ...] = ()
    """The archive hours read (UTC hour labels)."""
    rows: int | None = None
    """Rows of the version's files, when the writer counted them (else read the footers)."""


def read_manifest(store: ObjectStore, view: str, segment_start_ms: int) -> PublishedManifest | None:
    """The segment's published manifest, or None if no version was published."""
    key = published_key(view, segment_start_ms)
    try:
        data = store.get(key)
    except FileNotFoundError:
        return None
    try:
        return PublishedManifest.model_validate_json(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'file'}: {e['msg']}" for e in exc.errors()
        )
        raise ManifestError(f"{key} is not a published manifest: {problems}") from exc


def write_manifest(
    store: ObjectStore, view: str, segment_start_ms: int, manifest: PublishedManifest
) -> None:
    """Publish ``manifest`` (atomically: every storage write is); only tests write the older
    layout now, to have a store to migrate."""
    data = manifest.model_dump_json(indent=2, exclude_none=True).encode()
    store.put(published_key(view, segment_start_ms), data)
