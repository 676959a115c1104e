"""An hour directory holds every topic's files: the correction tells a topic's own by the
writer's file names, whatever dashes and digits the topic's name holds."""

from __future__ import annotations

import pytest

from pipelines.batch.archive import file_topic, topic_files
from pipelines.segments import HOUR_MS, archive_dead_letters_key, archive_events_key

HOUR = 1_700_000_000_000 - 1_700_000_000_000 % HOUR_MS


@pytest.mark.parametrize("topic", ["events", "pay", "pay-1", "pay-1-2-3", "a.b_c-9", "7"])
@pytest.mark.parametrize(("bucket", "factor"), [(0, 1), (3, 8)])
def test_a_files_topic_reads_back_from_the_writers_key(topic, bucket, factor) -> None:
    key = archive_events_key(HOUR, topic, 12, 65_536, 131_072, bucket, factor)
    assert file_topic(key) == topic


def test_a_topics_files_are_its_own_only() -> None:
    keys = [archive_events_key(HOUR, t, 0, 0, 10) for t in ("pay", "pay-1", "payouts")]
    files = {HOUR: keys, HOUR + HOUR_MS: keys[1:]}
    assert topic_files(files, "pay") == {HOUR: keys[:1]}
    assert topic_files(files, "pay-1") == {HOUR: [keys[1]], HOUR + HOUR_MS: [keys[1]]}
    assert (
        file_topic(archive_dead_letters_key(HOUR, "pay", 0, 0, 10).replace(".parquet", ".json"))
        is None
    )
