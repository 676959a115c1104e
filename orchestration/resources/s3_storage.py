"""The ``prod`` storage root: an S3 prefix reached through dagster-aws' ``S3Resource``.

A module of its own so that only the ``prod`` resource set imports dagster-aws, which is
slow to import, and every process that loads the code location would pay for it: the
webserver, the daemon and each run worker.
"""

from __future__ import annotations

from dagster_aws.s3 import S3Resource
from pydantic import Field

from orchestration.resources.storage import StorageResource
from pipelines.storage import ObjectStore

__all__ = ["S3StorageResource"]


class S3StorageResource(StorageResource):
    """An ``s3://bucket/prefix`` root; credentials and region come from the nested S3Resource."""

    root: str = Field(description="s3://bucket/prefix of the storage root.")
    s3: S3Resource = Field(default_factory=S3Resource, description="boto3 S3 client settings.")

    def open(self) -> ObjectStore:
        from pipelines.storage.s3 import S3ObjectStore

        store = S3ObjectStore(self.root, endpoint_url=self.s3.endpoint_url)
        store.client = self.s3.get_client()  # the resource's credentials, region and retries
        return store

    def location(self) -> str:
        return self.root
