"""Parquet in and out of the object store: one compression, one reader, for every file Sluice
writes (segments, checkpoints, the archive, batch versions)."""

from __future__ import annotations

import io
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["read_parquet", "to_parquet"]


def to_parquet(table: pa.Table, dictionary: bool | Sequence[str] = True) -> bytes:
    """``table`` as Parquet bytes (zstd), ready for :meth:`ObjectStore.put`; ``dictionary``:
    the columns to dictionary-encode (all by default). A column of (nearly) unique values
    gains nothing from a dictionary and costs the writer its attempt at one."""
    sink = io.BytesIO()
    use = dictionary if isinstance(dictionary, bool) else list(dictionary)
    pq.write_table(table, sink, compression="zstd", use_dictionary=use)
    return sink.getvalue()


def read_parquet(data: bytes, columns: Sequence[str] | None = None) -> pa.Table:
    """The table in Parquet ``data`` (only ``columns`` if given)."""
    return pq.read_table(io.BytesIO(data), columns=list(columns) if columns else None)
