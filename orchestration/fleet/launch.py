"""Start a local fleet: validate the views, make sure the topics exist, plan, spawn."""

from __future__ import annotations

from orchestration.fleet.local import LocalFleet
from orchestration.job_model import plan_job_model
from orchestration.runtime import Runtime
from pipelines.exceptions import ViewDefinitionError
from pipelines.kafka import consumer, ensure_topics
from pipelines.settings import as_environment
from pipelines.stream import TaskId

__all__ = ["child_environment", "start_fleet"]


def child_environment(runtime: Runtime) -> dict[str, str]:
    """The variables every process the supervisor starts gets: the runtime's effective settings,
    passed explicitly (the state directory resolved, so children agree whatever their cwd)."""
    settings = runtime.settings.model_copy(
        update={"state_dir": runtime.settings.resolved_state_dir}
    )
    kafka = runtime.kafka.model_copy(update={"bootstrap_servers": runtime.bootstrap()})
    return {**as_environment(settings), **as_environment(kafka)}


def start_fleet(
    runtime: Runtime, workers: int, views_file: str | None, topic: str | None
) -> LocalFleet:
    """Validate the views, make sure the topics exist, plan the job model and start workers."""
    settings = runtime.settings
    views = runtime.active_views(views_file)  # fail fast on a bad definition
    topic = topic or settings.topic
    if not any(v.topic == topic for v in views):
        raise ViewDefinitionError(f"no view reads topic {topic!r}; nothing for the workers to do")
    bootstrap = runtime.bootstrap()
    ensure_topics(
        bootstrap, {topic: settings.partitions, settings.dead_letter_topic: 1}, runtime.kafka
    )
    probe = consumer(bootstrap, runtime.kafka)
    try:
        partitions = sorted(probe.partitions_for_topic(topic) or [])
    finally:
        probe.close()
    job_model = plan_job_model([TaskId(topic, p) for p in partitions], workers)
    fleet = LocalFleet(
        job_model,
        views_file=views_file or str(settings.views_file),
        env=child_environment(runtime),
        log_dir=settings.resolved_state_dir / "logs",
    )
    fleet.start()
    return fleet
