"""Local-directory backend, the embedded default.

A conditional put (:meth:`LocalObjectStore.put_if`) compares and renames under an exclusive
``flock`` on a hidden lock file next to the object, so processes sharing the directory see one
order of swaps. The lock is held only for a read, a comparison and a rename; a writer waits
for it at most :data:`LOCK_WAIT_S` and then fails rather than hang.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
import time
from pathlib import Path

from pipelines.exceptions import StorageError
from pipelines.storage.base import ObjectStore

__all__ = ["LOCK_WAIT_S", "LocalObjectStore"]

LOCK_WAIT_S = 10.0


class LocalObjectStore(ObjectStore):
    def __init__(self, root: str | Path) -> None:
        self.path = Path(root).expanduser().resolve()
        self.root = str(self.path)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create storage root {self.path}: {exc}") from exc

    def _file(self, key: str) -> Path:
        target = (self.path / key).resolve()
        if self.path not in target.parents:
            raise StorageError(f"key {key!r} escapes the storage root {self.path}")
        return target

    def put(self, key: str, data: bytes) -> None:
        self._write(self._file(key), data)

    def _write(self, target: Path, data: bytes) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def get(self, key: str) -> bytes:
        return self._file(key).read_bytes()

    def get_versioned(self, key: str) -> tuple[bytes, str] | None:
        try:
            data = self.get(key)
        except FileNotFoundError:
            return None
        return data, _version(data)

    def put_if(self, key: str, data: bytes, version: str | None) -> bool:
        target = self._file(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        lock = target.with_name(f".{target.name}.lock")
        with open(lock, "a+b") as handle:
            deadline = time.monotonic() + LOCK_WAIT_S
            while True:
                try:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise StorageError(
                            f"{key}: another writer held its lock for over {LOCK_WAIT_S:g} s"
                        ) from None
                    time.sleep(0.01)
            try:
                current = self.get_versioned(key)
                if (None if current is None else current[1]) != version:
                    return False
                self._write(target, data)
                return True
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def list(self, prefix: str) -> list[str]:
        base = self.path / prefix
        if base.is_file():
            return [prefix]
        if not base.is_dir():
            return []
        keys = [
            p.relative_to(self.path).as_posix()
            for p in base.rglob("*")
            if p.is_file() and not p.name.startswith(".")
        ]
        return sorted(keys)

    def delete(self, key: str) -> None:
        self._file(key).unlink(missing_ok=True)

    def size(self, key: str) -> int | None:
        try:
            return self._file(key).stat().st_size
        except FileNotFoundError:
            return None

    def uri(self, key: str) -> str:
        return str(self.path / key)


def _version(data: bytes) -> str:
    """A local object's version: its content's digest (two writes of the same bytes are one
    version, which is all a compare-and-swap of a record that names its writer needs)."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()
