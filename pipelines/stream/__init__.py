"""Stream workers: tasks, window state, checkpoints and realtime segments."""

from pipelines.stream.task import StreamTask
from pipelines.stream.worker import StreamWorker, TaskId, consumer_group

__all__ = ["StreamTask", "StreamWorker", "TaskId", "consumer_group"]
