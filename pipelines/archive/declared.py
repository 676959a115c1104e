"""What of a topic's declaration the raw archive cannot hold yet.

The archive writes each topic's declared columns (:func:`pipelines.archive.schema.archive_schema`:
any column, type and nullability), and the Spark correction reads them back with the same
schema, deduplicating by the declared id (or keeping every record without one); the record's
key, timestamp, partition and offset are columns like the others. What is left: header
columns need readers that hand the decoder the records' headers; until they do, the loader
refuses a declaration that names one, rather than accept it and archive empty columns.
"""

from __future__ import annotations

from pipelines.events.declaration import TopicDeclaration

__all__ = ["unsupported"]


def unsupported(declaration: TopicDeclaration) -> list[str]:
    """Why the archive cannot hold ``declaration``'s events yet (empty: it can)."""
    found = []
    if declaration.record.headers:
        found.append("record header columns are not supported yet (issue 46)")
    return found
