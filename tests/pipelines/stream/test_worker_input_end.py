"""A worker that has read a bounded input to its end checkpoints at once: the archive sensor
closes the input's last hours only when every task has checkpointed through its end offsets,
so the hours would otherwise wait for the checkpoint interval."""

from __future__ import annotations

from kafka import TopicPartition

from pipelines.config import SluiceSettings
from pipelines.generator import GeneratorOptions
from pipelines.kafka.memory import MemoryBroker
from tests.fixtures.processes import wait_until
from tests.fixtures.stream import example_views_on, replayed_topic, start_worker


def test_a_worker_checkpoints_once_it_has_read_the_input_to_its_recorded_end(tmp_path) -> None:
    broker = MemoryBroker()
    options = GeneratorOptions(max_events=3_000, peak_rate=3_000, speedup=480)
    topic = replayed_topic(broker, "ended", 2, options)
    # the topic's ends as the records it holds say
    ends = {p: broker.records(topic, p)[-1].offset + 1 for p in range(2)}
    settings = SluiceSettings(
        state_dir=tmp_path / "state",
        dead_letter_topic=f"{topic}.dlq",
        flush_interval_s=1.0,
        checkpoint_interval_s=3600.0,  # never, within this test, but for the input's end
        status_interval_s=0.2,
    )
    worker, control, thread = start_worker(broker, topic, 2, example_views_on(topic), settings)
    try:

        def tasks() -> dict[int, object]:
            return {s.partition: s for s in control.tasks() if s.topic == topic}

        def caught_up() -> bool:
            found = tasks()
            return len(found) == 2 and all(found[p].next_offset == ends[p] for p in ends)

        wait_until(caught_up, 60, "the worker to read the whole topic")
        # caught up with no end recorded: five more reports, and still no checkpoint
        reports = [max(s.heartbeat_at for s in tasks().values())]

        def five_more_reports() -> bool:
            latest = max(s.heartbeat_at for s in tasks().values())
            if latest != reports[-1]:
                reports.append(latest)
            return len(reports) > 5

        wait_until(five_more_reports, 30, "five more status reports")
        assert all(s.checkpointed_offset is None for s in tasks().values())

        listed = {p: broker.bounds(TopicPartition(topic, p))[1] for p in range(2)}
        control.input_ends.record(topic, listed)
        assert dict(control.input_ends.of_topic(topic).end_offsets) == ends
        wait_until(
            lambda: all(tasks()[p].checkpointed_offset == ends[p] for p in ends),
            30,
            "a checkpoint through the input's end",
        )
    finally:
        worker.stop_event.set()
        thread.join(60)
        control.close()
