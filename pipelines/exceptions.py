"""Errors of the data plane: one root, one class per thing that can go wrong.

Every message carries the offending value so a user can fix the input without reading code.
"""

from __future__ import annotations


class SluiceError(Exception):
    """Root of every error Sluice raises on purpose."""


class ConfigError(SluiceError):
    """A setting or environment variable has a value Sluice cannot use."""


class InvalidSetting(ConfigError):
    """An option (environment variable or settings file) has a value its model refuses; the
    CLI prints the one-line message and exits 2."""


class ViewDefinitionError(SluiceError):
    """A view definition (YAML) is invalid; the message names the view and the field."""


class DeclarationChangeRefused(ViewDefinitionError):
    """A topic's declaration changed in a way its archive or its deployed views cannot follow
    (a column's type changed, or a column a deployed view uses was removed)."""


class UnknownAggregation(ViewDefinitionError):
    """A view asks for an aggregation that is not registered."""


class BrokerUnavailable(SluiceError):
    """No Kafka-protocol broker answers at the configured bootstrap servers."""


class StorageError(SluiceError):
    """Reading or writing the storage root (local directory or S3) failed."""


class CheckpointError(SluiceError):
    """A checkpoint could not be read or is not compatible with the running views."""


class TaskFenced(SluiceError):
    """A task's owner learned that a newer generation owns it: it must stop without writing."""

    def __init__(self, task: str, generation: int, detail: str) -> None:
        super().__init__(f"{task}: generation {generation} is fenced: {detail}")
        self.task = task
        self.generation = generation


class ViewCrash(SluiceError):
    """One view of a task failed (its state cannot be restored, its update raised); the task
    restarts from its checkpoint and Mist's rule may disable that view there."""

    def __init__(self, task: str, view: str, cause: BaseException) -> None:
        super().__init__(f"{task}: view {view} crashed: {type(cause).__name__}: {cause}")
        self.task = task
        self.view = view
        self.cause = cause


class QueryError(SluiceError):
    """A query asked for something that cannot be answered (unknown view, bad range)."""


class SchemaRegistryUnreachable(SluiceError):
    """The schema registry did not answer (or answered a server error): an Avro message's
    schema is unknown for now, not unknown to the registry, so the task retries rather than
    dead-letter the message."""
