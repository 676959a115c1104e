"""Parquet in and out of the object store: one compression, one reader, for every file Sluice
writes (segments, checkpoints, the archive, batch versions)."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["ParquetStream", "read_parquet", "to_parquet"]


def to_parquet(table: pa.Table, dictionary: bool | Sequence[str] = True) -> bytes:
    """``table`` as Parquet bytes (zstd), ready for :meth:`ObjectStore.put`; ``dictionary``:
    the columns to dictionary-encode (all by default). A column of (nearly) unique values
    gains nothing from a dictionary and costs the writer its attempt at one."""
    file = ParquetStream(table.schema, dictionary)
    file.write(table)
    return file.finish()


class ParquetStream:
    """One Parquet file written a row group at a time, in memory until :meth:`finish` (zstd,
    a dictionary for the columns ``dictionary`` names, as :func:`to_parquet` writes). The sink
    is Arrow's own buffer, so a row group is encoded and compressed without the GIL (another
    thread may write it while Python goes on)."""

    def __init__(self, schema: pa.Schema, dictionary: bool | Sequence[str] = True) -> None:
        self._sink = pa.BufferOutputStream()
        use = dictionary if isinstance(dictionary, bool) else list(dictionary)
        self._writer = pq.ParquetWriter(self._sink, schema, compression="zstd", use_dictionary=use)
        self.rows = 0

    def write(self, table: pa.Table) -> None:
        """Append ``table`` as one row group (or more, past a million rows)."""
        self._writer.write_table(table)
        self.rows += table.num_rows

    def finish(self) -> bytes:
        """The file's footer written, its bytes for :meth:`ObjectStore.put`."""
        self._writer.close()
        return self._sink.getvalue().to_pybytes()


def read_parquet(data: bytes, columns: Sequence[str] | None = None) -> pa.Table:
    """The table in Parquet ``data`` (only ``columns`` if given). Read as one file, not
    through ``pq.read_table``'s dataset layer: a quarter of the time on the small files a
    flush writes, which the publisher and the query read by the thousand."""
    return pq.ParquetFile(pa.BufferReader(data)).read(columns=list(columns) if columns else None)
