"""Which tables a storage root publishes to: the warehouse is the storage root.

Whoever opens a root from the settings (:class:`orchestration.runtime.Runtime`, the
correction job) registers how to open its tables; every reader and writer handed that
:class:`~pipelines.storage.ObjectStore` then finds them with :func:`tables_for`. A root
opened without settings (library calls, most unit tests) has none and keeps the older
layout (``batch/v<N>/`` and ``_published.json``), which :func:`tables_for` says by None.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from pipelines.storage import ObjectStore

if TYPE_CHECKING:  # the catalog (pyiceberg) loads when a root's tables are first opened
    from pipelines.tables.catalog import ViewTables

__all__ = ["forget_tables", "register_tables", "tables_for"]

_factories: dict[str, Callable[[], ViewTables]] = {}
_opened: dict[str, ViewTables] = {}
_lock = threading.Lock()


def _key(root: str) -> str:
    return root.rstrip("/")


def register_tables(root: str, open_tables: Callable[[], ViewTables] | ViewTables) -> None:
    """Publish and read ``root``'s views through these tables (opened on first use)."""
    with _lock:
        key = _key(root)
        old = _opened.pop(key, None)
        if not callable(open_tables):  # tables already open
            _opened[key] = open_tables
            _factories[key] = lambda: open_tables
        else:
            _factories[key] = open_tables
    if old is not None and old is not open_tables:
        old.close()


def forget_tables(root: str) -> None:
    """Back to the older layout for ``root`` (tests)."""
    with _lock:
        key = _key(root)
        _factories.pop(key, None)
        old = _opened.pop(key, None)
    if old is not None:
        old.close()


def tables_for(store: ObjectStore) -> ViewTables | None:
    """The tables registered for ``store``'s root, or None (the older layout)."""
    key = _key(store.root)
    with _lock:
        tables = _opened.get(key)
        if tables is not None:
            return tables
        factory = _factories.get(key)
        if factory is None:
            return None
        tables = _opened[key] = factory()
        return tables
