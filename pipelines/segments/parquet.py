"""Parquet in and out of the object store: one compression, one reader, for every file Sluice
writes (segments, checkpoints, the archive, batch versions)."""

from __future__ import annotations

import io
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["read_parquet", "to_parquet"]


def to_parquet(table: pa.Table) -> bytes:
    """``table`` as Parquet bytes (zstd), ready for :meth:`ObjectStore.put`."""
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue()


def read_parquet(data: bytes, columns: Sequence[str] | None = None) -> pa.Table:
    """The table in Parquet ``data`` (only ``columns`` if given)."""
    return pq.read_table(io.BytesIO(data), columns=list(columns) if columns else None)
