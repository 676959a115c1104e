"""The control store shared by the stream workers (writers) and the control plane (readers)."""

from pipelines.control.store import ControlStore, FleetSample, TaskStatus

__all__ = ["ControlStore", "FleetSample", "TaskStatus"]
