"""Running the stream-worker fleet: local processes (AWS Auto Scaling lives in autoscaling)."""

from orchestration.fleet.local import LocalFleet, WorkerProcess

__all__ = ["LocalFleet", "WorkerProcess"]
