"""Object storage under the storage root: a local directory by default, or ``s3://``.

May import: ``pipelines.exceptions`` only.
"""

from __future__ import annotations

from pipelines.storage.base import ObjectStore
from pipelines.storage.local import LocalObjectStore

__all__ = ["LocalObjectStore", "ObjectStore", "open_store"]


def open_store(
    root: str, s3_endpoint_url: str | None = None, timeout_s: float | None = None
) -> ObjectStore:
    """The backend for ``root``: ``s3://bucket/prefix`` or a directory path. ``timeout_s``
    bounds each S3 request (SLUICE_STORAGE_TIMEOUT_S); a local directory has no deadline."""
    if root.startswith("s3://"):
        from pipelines.storage.s3 import S3ObjectStore

        return S3ObjectStore(root, endpoint_url=s3_endpoint_url, timeout_s=timeout_s)
    return LocalObjectStore(root)
