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


class UnknownAggregation(ViewDefinitionError):
    """A view asks for an aggregation that is not registered."""


class BrokerUnavailable(SluiceError):
    """No Kafka-protocol broker answers at the configured bootstrap servers."""


class StorageError(SluiceError):
    """Reading or writing the storage root (local directory or S3) failed."""


class CheckpointError(SluiceError):
    """A checkpoint could not be read or is not compatible with the running views."""


class QueryError(SluiceError):
    """A query asked for something that cannot be answered (unknown view, bad range)."""
