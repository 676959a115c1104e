"""The declared decoder adds a topic's derived columns to each decoded batch under their names,
nulls as every column holds them (strings None; others 0 and a mask), computed after the
record's columns and in declared order, as a plain-Python reading of the messages gives."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import numpy as np

from pipelines.events.declaration import TopicDeclaration
from pipelines.events.declared import decoder_for
from pipelines.events.decode import RecordBatch

DECLARATION = TopicDeclaration.model_validate(
    {
        "topic": "payments",
        "fields": [
            {"name": "merchant", "type": "string"},
            {"name": "country", "type": "string", "path": "card.country", "nullable": True},
            {"name": "amount", "type": "double", "nullable": True},
            {"name": "refunded_at", "type": "timestamp", "nullable": True},
        ],
        "event_time": {"path": "created", "format": "iso8601"},
        "record": {"key": "card", "headers": {"channel": "channel"}},
        "derived": [
            {"name": "merchant_lc", "expr": "lower(merchant)"},
            {"name": "hour_of_day", "expr": "hour(event_time)"},
            {"name": "day", "expr": "weekday(event_time)"},
            {"name": "where_from", "expr": "coalesce(country, channel, 'unknown')"},
            {"name": "shouted", "expr": "upper(where_from)"},
            {"name": "size", "expr": "abs(amount)"},
            {"name": "refund_hour", "expr": "hour(refunded_at)"},
            {"name": "card_lc", "expr": "lower(card)"},
        ],
    }
)


def _message(i: int) -> dict:
    created = datetime(2026, 3, 1 + i % 7, i % 24, 30, tzinfo=UTC)
    message = {"merchant": ["Acme", "ÉCOLE", "zed"][i % 3], "created": created.isoformat()}
    if i % 4:
        message["card"] = {"country": ["fr", None, "US"][i % 3]}
    if i % 5:
        message["amount"] = -1.25 * i
    if i % 6 == 0:
        message["refunded_at"] = int(created.timestamp() * 1000) + i * 3_600_000
    return message


def test_derived_columns_are_in_the_batch_as_a_plain_reading_gives() -> None:
    messages = [_message(i) for i in range(60)]
    keys = [None if i % 7 == 0 else f"Card-{i % 3}".encode() for i in range(60)]
    headers = [[("channel", b"web")] if i % 2 else [] for i in range(60)]
    batch = RecordBatch(
        list(range(60)),
        [1_000] * 60,
        [json.dumps(m).encode() for m in messages],
        keys,
        headers,
    )
    decoded = decoder_for(DECLARATION)(
        batch, -(2**62), max_message_bytes=1 << 20, max_future_ms=10**12, partition=0
    )
    assert not decoded.dead_letters and len(decoded) == 60

    def column(name: str) -> list:
        values = decoded.columns[name].tolist()
        mask = decoded.nulls.get(name, np.zeros(len(values), dtype=bool)).tolist()
        return [None if m else v for v, m in zip(values, mask, strict=True)]

    expected: dict[str, list] = {name: [] for name in DECLARATION.columns()}
    for message, key, header in zip(messages, keys, headers, strict=True):
        created = datetime.fromisoformat(message["created"])
        country = (message.get("card") or {}).get("country")
        channel = dict(header).get("channel")
        where_from = country or (channel.decode() if channel else None) or "unknown"
        amount = message.get("amount")
        refunded = message.get("refunded_at")
        expected["merchant_lc"].append(message["merchant"].lower())
        expected["hour_of_day"].append(created.hour)
        expected["day"].append(created.isoweekday())
        expected["where_from"].append(where_from)
        expected["shouted"].append(where_from.upper())
        expected["size"].append(None if amount is None else abs(amount))
        expected["refund_hour"].append(
            None if refunded is None else datetime.fromtimestamp(refunded / 1000, UTC).hour
        )
        expected["card_lc"].append(None if key is None else key.decode().lower())
    for name in [d.name for d in DECLARATION.derived_columns()]:
        assert column(name) == expected[name], name
    assert decoded.columns["size"].dtype == np.float64
    assert decoded.columns["merchant_lc"].dtype == object
    assert "size" in decoded.nulls and "refund_hour" in decoded.nulls
    assert "card_lc" not in decoded.nulls  # strings hold None
