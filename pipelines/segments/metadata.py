"""What a segment file says about itself: the view and definition it was written for.

Every segment schema carries ``{"view", "fingerprint", "kind"}`` as JSON under the ``sluice``
key of the Parquet schema metadata; readers skip a file written for another definition of
the view (an edit that changed what the states mean). One writer, one reader.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

__all__ = ["SEGMENT_KINDS", "SegmentMeta", "segment_meta", "segment_schema", "written_for"]

_KEY = b"sluice"
SEGMENT_KINDS = ("realtime", "session", "batch")
"""``realtime``: a task's window partials; ``session``: a task's session rows (also a session
view's checkpoint state); ``batch``: a correction's exact values."""


@dataclass(frozen=True)
class SegmentMeta:
    view: str
    fingerprint: str
    kind: str


def segment_schema(fields: Sequence[pa.Field], view: str, fingerprint: str, kind: str) -> pa.Schema:
    """A segment file's schema: ``fields`` plus the metadata :func:`segment_meta` reads."""
    if kind not in SEGMENT_KINDS:
        raise ValueError(f"segment kind {kind!r} is not one of {SEGMENT_KINDS}")
    meta = {"view": view, "fingerprint": fingerprint, "kind": kind}
    return pa.schema(list(fields), metadata={_KEY: json.dumps(meta).encode()})


def segment_meta(schema: pa.Schema) -> SegmentMeta | None:
    """The metadata of a segment file's schema; None for a file without it."""
    raw = (schema.metadata or {}).get(_KEY)
    if raw is None:
        return None
    meta = json.loads(raw)
    return SegmentMeta(
        meta.get("view", ""), meta.get("fingerprint", ""), meta.get("kind", "realtime")
    )


def written_for(schema: pa.Schema, fingerprint: str) -> bool:
    """True if the file was written for the view definition with this fingerprint."""
    meta = segment_meta(schema)
    return meta is not None and meta.fingerprint == fingerprint
