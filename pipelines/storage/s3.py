"""S3 backend through boto3: one PUT per object is already atomic, and a conditional PUT
(``If-Match`` an ETag, ``If-None-Match: *``) is S3's compare-and-swap on one object.

Every request has a deadline: ``timeout_s`` to connect and for each read of the answer, and
one retry (boto3's defaults are 60 s each and up to five attempts in legacy mode: minutes
against an endpoint that accepts connections and never answers)."""

from __future__ import annotations

from urllib.parse import urlparse

from pipelines.exceptions import StorageError
from pipelines.storage.base import ObjectStore

__all__ = ["DEFAULT_TIMEOUT_S", "S3ObjectStore"]

DEFAULT_TIMEOUT_S = 10.0
"""SLUICE_STORAGE_TIMEOUT_S's default, for stores opened without settings."""


class S3ObjectStore(ObjectStore):
    def __init__(
        self, root: str, endpoint_url: str | None = None, timeout_s: float | None = None
    ) -> None:
        import boto3
        from botocore.config import Config

        parsed = urlparse(root)
        if parsed.scheme != "s3" or not parsed.netloc:
            raise StorageError(f"expected s3://bucket[/prefix], got {root!r}")
        self.root = root.rstrip("/")
        self.bucket = parsed.netloc
        self.prefix = parsed.path.strip("/")
        timeout_s = DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s
        config = Config(
            connect_timeout=timeout_s,
            read_timeout=timeout_s,
            retries={"max_attempts": 2, "mode": "standard"},
        )
        self.client = boto3.client("s3", endpoint_url=endpoint_url, config=config)

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def put(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)

    def get_versioned(self, key: str) -> tuple[bytes, str] | None:
        try:
            found = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
        except self.client.exceptions.NoSuchKey:
            return None
        return found["Body"].read(), found["ETag"]

    def put_if(self, key: str, data: bytes, version: str | None) -> bool:
        condition = {"IfNoneMatch": "*"} if version is None else {"IfMatch": version}
        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data, **condition)
        except self.client.exceptions.ClientError as exc:
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if status in (409, 412):  # 409: a concurrent conditional write is under way
                return False
            raise
        return True

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
