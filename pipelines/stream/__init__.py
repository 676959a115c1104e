"""Stream workers: tasks, window state, checkpoints and realtime segments.

May import: the rest of ``pipelines`` (events, views, kinds, archive, segments, storage,
control, kafka).
"""

from pipelines.stream.clients import WorkerClients, consumer_group, open_worker_clients
from pipelines.stream.task import StreamTask
from pipelines.stream.worker import StreamWorker, TaskId

__all__ = [
    "StreamTask",
    "StreamWorker",
    "TaskId",
    "WorkerClients",
    "consumer_group",
    "open_worker_clients",
]
