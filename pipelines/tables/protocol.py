"""What serving, the correction and quality need of a storage root's tables.

The runtime and Dagster's storage resource build one :class:`Tables` from the settings
(:class:`pipelines.tables.ViewTables`, the Iceberg implementation) and pass it to whoever
reads or writes the views' results: no process-wide lookup decides where results go.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # pyiceberg loads where a table is opened
    from pyiceberg.table import Table

    from pipelines.views.model import View

__all__ = ["Tables"]


class Tables(Protocol):
    """The table of every view of one storage root."""

    def load(self, view: View) -> Table:
        """The view's table, created (or evolved to the view's columns) if needed."""
        ...

    def find(self, view: str) -> Table | None:
        """The view's table if it exists (readers never create one)."""
        ...

    def name(self, view: str) -> str:
        """The table's name as engines know it (``namespace.view``)."""
        ...

    def close(self) -> None:
        """Release the catalog's connections."""
        ...
