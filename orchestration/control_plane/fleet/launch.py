"""Start a local fleet: validate the views, make sure the topics exist, start the agents."""

from __future__ import annotations

from collections.abc import Callable

from orchestration.control_plane.fleet.local import LocalFleet, local_agent_ids
from orchestration.control_plane.runtime import Runtime
from pipelines.exceptions import ConfigError, ViewDefinitionError
from pipelines.kafka import ensure_topics
from pipelines.settings import as_environment

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
    runtime: Runtime,
    agents: int,
    views_file: str | None,
    topic: str | None,
    on_fleet: Callable[[LocalFleet], None] | None = None,
) -> LocalFleet:
    """Validate the views, make sure the topics exist and start ``agents`` local agents; they
    register, elect a coordinator and share the topic's tasks through the job model.
    ``on_fleet`` gets the fleet before any agent starts (a caller in another thread can then
    stop it whatever happens here)."""
    if agents < 1:
        raise ConfigError(f"need at least one agent, got {agents}")
    settings = runtime.settings
    views = runtime.active_views(views_file)  # fail fast on a bad definition
    topic = topic or settings.topic
    if not any(v.topic == topic for v in views):
        raise ViewDefinitionError(f"no view reads topic {topic!r}; nothing for the agents to do")
    ensure_topics(
        runtime.bootstrap(),
        {topic: settings.partitions, settings.dead_letter_topic: 1},
        runtime.kafka,
    )
    fleet = LocalFleet(
        local_agent_ids(agents),
        topic=topic,
        views_file=views_file or str(settings.views_file),
        env=child_environment(runtime),
        log_dir=settings.resolved_state_dir / "logs",
        control=runtime.control,
    )
    if on_fleet is not None:
        on_fleet(fleet)
    fleet.start()
    return fleet
