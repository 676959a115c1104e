"""Local-directory backend, the embedded default."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from pipelines.exceptions import StorageError
from pipelines.storage.base import ObjectStore

__all__ = ["LocalObjectStore"]


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
        target = self._file(key)
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
