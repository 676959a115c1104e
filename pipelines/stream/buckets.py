"""Key buckets: which virtual task of a partition a record belongs to (Samza's SEP-32).

A virtual task runs bucket ``b`` of factor ``F`` of a partition: the records whose *bucket
hash* is ``b`` modulo ``F``. The bucket hash of a record is XXH64 (seed 0) of its Kafka key's
bytes, a published algorithm, so every process, language and Sluice version agrees on it; a
record without a key hashes as its offset (SEP-32's fallback), so keyless records spread
evenly over the buckets while a key's records always meet in one. ``F`` is a power of two, so
buckets nest: bucket ``b`` of ``F`` splits into ``b`` and ``b + F`` of ``2F``, and those two
merge back into ``b``.

How a view's state maps to buckets. Window state is keyed by (window, grouping columns), and
every row is a partial aggregate that the query merges with the same group's rows from the
other tasks (as it already does across partitions). So a row may live in any one task without
changing a result; what must hold is that each record is counted by exactly one task. A split
therefore gives each child the rows of its own keys where a row's keys are known: a view that
groups by the topic's key field (``SLUICE_KEY_FIELD``, ``org`` as the generator writes) has
rows whose bucket hash is that of the group's value, and they go to the child of that hash.
Rows of views grouped by anything else mix keys: they stay with the *first* child (bucket
``b``), the second starts empty. Either way the children's states sum to the parent's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import xxhash

from pipelines.settings import MAX_BUCKET_FACTOR

__all__ = [
    "MAX_FACTOR",
    "backlog_share",
    "check_bucket",
    "children",
    "key_hashes",
    "parent",
    "value_hashes",
]

MAX_FACTOR = MAX_BUCKET_FACTOR
"""The most buckets a partition may be split into."""

_xxh64 = xxhash.xxh64_intdigest


def check_bucket(bucket: int, factor: int) -> None:
    """Raise ValueError unless ``factor`` is a power of two up to MAX_FACTOR and ``bucket`` in it."""
    if factor < 1 or factor > MAX_FACTOR or factor & (factor - 1):
        raise ValueError(f"bucket factor {factor} is not a power of two in 1..{MAX_FACTOR}")
    if not 0 <= bucket < factor:
        raise ValueError(f"bucket {bucket} is not in 0..{factor - 1}")


def key_hashes(keys: Sequence[bytes | None], offsets: Sequence[int]) -> np.ndarray:
    """Bucket hash of each record: XXH64 of its key, or its offset when it has none."""
    return np.fromiter(
        (
            _xxh64(key) if key is not None else offset
            for key, offset in zip(keys, offsets, strict=True)
        ),
        dtype=np.uint64,
        count=len(offsets),
    )


def value_hashes(values: Sequence[str | None]) -> np.ndarray:
    """Bucket hash of the records keyed by each value (its UTF-8 bytes); None hashes as 0."""
    return np.fromiter(
        (0 if v is None else _xxh64(v.encode()) for v in values),
        dtype=np.uint64,
        count=len(values),
    )


def children(bucket: int, factor: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """The two (bucket, factor) a split of ``bucket`` of ``factor`` makes."""
    check_bucket(bucket, factor * 2)
    return (bucket, factor * 2), (bucket + factor, factor * 2)


def parent(bucket: int, factor: int) -> tuple[int, int]:
    """The (bucket, factor) that ``bucket`` of ``factor`` merges into with its sibling."""
    check_bucket(bucket, factor)
    if factor == 1:
        raise ValueError("a task of factor 1 is a whole partition: it has no parent")
    return bucket % (factor // 2), factor // 2


def backlog_share(gap: int, factor: int) -> int:
    """A bucket's share of its partition's offset gap (rounded up): what lag and status count
    as its backlog, since it keeps about 1/factor of the records it reads."""
    return -(-max(0, gap) // factor)
