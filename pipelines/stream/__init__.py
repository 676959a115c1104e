"""Stream workers: tasks, window state, checkpoints and realtime segments.

May import: the rest of ``pipelines`` (events, views, kinds, archive, segments, storage,
control, kafka).
"""

from pipelines.stream.task import StreamTask
from pipelines.stream.worker import StreamWorker, TaskId, consumer_group

__all__ = ["StreamTask", "StreamWorker", "TaskId", "consumer_group"]
