"""The control plane without Dagster: the fleet of agents, lag, autoscaling, the runtime
that opens what a command needs, child processes, the warm Spark and the Dagster service
that ``sluice up`` runs. Nothing here imports Dagster (an import-linter contract), so the
CLI and the agents start without it."""
