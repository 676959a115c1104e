"""The control store shared by the stream workers (writers) and the control plane (readers).

May import: third-party libraries only (SQLAlchemy); every layer above reads or writes it.
"""

from pipelines.control.crashes import CrashLog, CrashPlan, TaskCrash, crash_plan
from pipelines.control.inputs import InputEnd, InputEndLog
from pipelines.control.jobs import (
    TASK_STATES,
    AgentRecord,
    Assignment,
    JobEvent,
    JobModelStore,
    TaskViewState,
)
from pipelines.control.rescales import RescaleLog, RescaleRecord
from pipelines.control.store import ControlStore, FleetSample, TaskStatus

__all__ = [
    "TASK_STATES",
    "AgentRecord",
    "Assignment",
    "ControlStore",
    "CrashLog",
    "CrashPlan",
    "FleetSample",
    "InputEnd",
    "InputEndLog",
    "JobEvent",
    "JobModelStore",
    "RescaleLog",
    "RescaleRecord",
    "TaskCrash",
    "TaskStatus",
    "TaskViewState",
    "crash_plan",
]
