"""The storage root: segments, checkpoints and the archive live under one key space.

Every write is atomic (write then publish: a rename locally, one PUT on S3), so a reader
sees a whole object or none, and a crash never leaves half a checkpoint. One kind of write is
also conditional (:meth:`ObjectStore.put_if`, a compare-and-swap on one object): what a fencing
token needs, since no store here has a transaction over several objects.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from pipelines.exceptions import StorageError

__all__ = ["ObjectStore"]


class ObjectStore(ABC):
    """Keys are '/'-separated relative paths such as ``segments/v/2015-02-26T21/t-0.parquet``."""

    root: str

    @abstractmethod
    def put(self, key: str, data: bytes) -> None:
        """Write ``data`` at ``key`` atomically, replacing what was there."""

    @abstractmethod
    def get(self, key: str) -> bytes:
        """The bytes at ``key``; :class:`FileNotFoundError` if there are none."""

    @abstractmethod
    def list(self, prefix: str) -> list[str]:
        """Keys under ``prefix`` (recursively), sorted."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove ``key``; no error if it is already gone."""

    def get_versioned(self, key: str) -> tuple[bytes, str] | None:
        """The bytes at ``key`` and a token naming that version (None if there are none):
        what :meth:`put_if` compares."""
        raise StorageError(f"{type(self).__name__} has no conditional writes")

    def put_if(self, key: str, data: bytes, version: str | None) -> bool:
        """Write ``data`` at ``key`` only if it still holds ``version`` (None: only if there
        is nothing there), atomically with the comparison; False, writing nothing, if not."""
        raise StorageError(f"{type(self).__name__} has no conditional writes")

    def exists(self, key: str) -> bool:
        try:
            self.get(key)
        except FileNotFoundError:
            return False
        return True

    def size(self, key: str) -> int | None:
        """Bytes at ``key`` where the backend knows them without a request, else None."""
        return None

    def uri(self, key: str) -> str:
        """A URI Spark, DuckDB or pyarrow can read the object from."""
        return f"{self.root.rstrip('/')}/{key}"
