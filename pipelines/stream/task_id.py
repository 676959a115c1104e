"""What names a stream task: a partition of a topic, or one key bucket of it (a virtual task).

``events:3`` is partition 3 of ``events``; ``events:3#5/8`` is bucket 5 of 8 of it
(:mod:`pipelines.stream.buckets`). The job model, status and logs all use these names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pipelines.stream.buckets import check_bucket

__all__ = ["TaskId"]

_NAME = re.compile(r"^(?P<topic>.+):(?P<partition>\d+)(?:#(?P<bucket>\d+)/(?P<factor>\d+))?$")


@dataclass(frozen=True, order=True)
class TaskId:
    topic: str
    partition: int
    bucket: int = 0
    factor: int = 1

    def __post_init__(self) -> None:
        check_bucket(self.bucket, self.factor)

    def __str__(self) -> str:
        if self.factor == 1:
            return f"{self.topic}:{self.partition}"
        return f"{self.topic}:{self.partition}#{self.bucket}/{self.factor}"

    @property
    def where(self) -> tuple[int, int]:
        """(bucket, factor)."""
        return self.bucket, self.factor

    @classmethod
    def parse(cls, text: str) -> TaskId:
        match = _NAME.match(text)
        if match is None:
            raise ValueError(
                f"task {text!r} is not TOPIC:PARTITION or TOPIC:PARTITION#BUCKET/FACTOR"
            )
        bucket, factor = match["bucket"], match["factor"]
        try:
            return cls(
                match["topic"],
                int(match["partition"]),
                int(bucket) if bucket else 0,
                int(factor) if factor else 1,
            )
        except ValueError as exc:
            raise ValueError(f"task {text!r}: {exc}") from exc
