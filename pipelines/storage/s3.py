"""S3 backend through boto3: one PUT per object is already atomic."""

from __future__ import annotations

from urllib.parse import urlparse

from pipelines.exceptions import StorageError
from pipelines.storage.base import ObjectStore

__all__ = ["S3ObjectStore"]


class S3ObjectStore(ObjectStore):
    def __init__(self, root: str, endpoint_url: str | None = None) -> None:
        import boto3

        parsed = urlparse(root)
        if parsed.scheme != "s3" or not parsed.netloc:
            raise StorageError(f"expected s3://bucket[/prefix], got {root!r}")
        self.root = root.rstrip("/")
        self.bucket = parsed.netloc
        self.prefix = parsed.path.strip("/")
        self.client = boto3.client("s3", endpoint_url=endpoint_url)

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def put(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)

    def get(self, key: str) -> bytes:
        try:
            return self.client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"].read()
        except self.client.exceptions.NoSuchKey:
            raise FileNotFoundError(key) from None

    def list(self, prefix: str) -> list[str]:
        full = self._key(prefix)
        cut = len(self.prefix) + 1 if self.prefix else 0
        keys: list[str] = []
        for page in self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=full
        ):
            keys += [obj["Key"][cut:] for obj in page.get("Contents", [])]
        return sorted(keys)

    def delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self._key(key))
