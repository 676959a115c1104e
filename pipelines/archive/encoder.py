"""The archive's encoding thread: Parquet row groups are encoded and compressed beside the
stream tasks, not in their loop.

Arrow releases the GIL while it encodes into its own buffers, so a worker decodes and
aggregates the next batches while the archive's last ones are written (a second core does
the Parquet work). One thread per process, so at most one core goes to it, and the row groups
of one file are written in the order they were handed over.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

__all__ = ["encode_later"]

_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None


def encode_later(work: Callable[..., Any], *args: Any) -> Future:
    """Run ``work(*args)`` on the encoding thread, after all work handed over before it."""
    global _executor
    with _lock:
        if _executor is None:  # started on first use: importing the archive starts nothing
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sluice-archive")
        return _executor.submit(work, *args)
