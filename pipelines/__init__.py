"""The data plane: everything that touches events, state and segments, with no Dagster in it.

Events and the generator, views and the aggregator registry, stream tasks and workers
(windows, checkpoints, realtime segments, dead letters), the raw archive, the on-disk format
(:mod:`pipelines.segments`), the Spark correction, the serving query, storage, the control
store, Kafka clients and the embedded broker, and the settings every layer reads.

May import: the standard library and third-party libraries only. Every other Sluice package
imports this one; it imports none of them (import-linter contracts in ``pyproject.toml``).
"""
