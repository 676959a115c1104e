"""An Avro topic's declaration made whole when it is loaded: its schema file found beside the
file that declares it, and its fields, when left out, read from its schema.

The schema is the schema file's, else the registry's latest for subject ``<topic>-value``
(:func:`~pipelines.events.registry.latest_schema`). The resolved declaration carries an
absolute schema file and its fields, so a process that receives it as JSON (a deployment, a
worker) decodes with the same columns and never asks the registry what they are. A schema
version registered later shows its new fields from the next load of the views, as a field
added to YAML does.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipelines.events.avro_fields import fields_from_schema, read_schema_file
from pipelines.events.declaration import TopicDeclaration
from pipelines.events.registry import latest_schema

__all__ = ["resolve_avro"]


def resolve_avro(
    declaration: TopicDeclaration,
    base: Path | None,
    registry: Callable[[], dict[str, Any] | None],
) -> TopicDeclaration:
    """``declaration`` with its schema file absolute (relative to ``base``, the declaring
    file's directory; the working directory without one) and its fields, if it declares none,
    from its Avro schema. ``registry``: the schema registry client's configuration, asked for
    only when the registry is needed. Raises ValueError saying what is missing;
    :class:`~pipelines.exceptions.SchemaRegistryUnreachable` when the registry does not
    answer."""
    if declaration.encoding != "avro":
        return declaration
    update: dict[str, Any] = {}
    schema: dict[str, Any] | None = None
    if declaration.schema_file is not None:
        path = Path(declaration.schema_file).expanduser()
        if not path.is_absolute():
            path = (base or Path.cwd()) / path
        path = path.resolve()
        schema = read_schema_file(path)
        update["schema_file"] = str(path)
    elif declaration.fields:
        if registry() is None:
            raise ValueError(_NO_REGISTRY)
    else:
        conf = registry()
        if conf is None:
            raise ValueError(_NO_REGISTRY)
        _, schema = latest_schema(conf, declaration.topic)
    if not declaration.fields and schema is not None:
        update["fields"] = [
            f.model_dump(exclude_defaults=True) for f in fields_from_schema(schema, declaration)
        ]
    if not update:
        return declaration
    return TopicDeclaration.model_validate(
        {**declaration.model_dump(exclude_defaults=True), **update}
    )


_NO_REGISTRY = (
    "encoding: avro without a schema_file reads schema ids through the schema registry, and "
    "none is set (SLUICE_SCHEMA_REGISTRY_URL)"
)
