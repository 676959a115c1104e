"""The fast path's msgspec structs, defined at run time from a declaration's readings, and
the columns of the structs it decodes (one pass per column, no Python step per event but
where a value is read from raw JSON or a null is found).
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Any

import msgspec
import numpy as np
import orjson

from pipelines.events.declaration import EVENT_TIME_MAX_MS, EVENT_TIME_MIN_MS, ColumnType
from pipelines.events.readings import DTYPES, FILL, Reading
from pipelines.events.times import column_to_ms

__all__ = ["as_column", "brackets", "getter", "structs"]


def brackets(value: bytes) -> int:
    """At least the message's depth (brackets in strings counted too)."""
    return value.count(b"{") + value.count(b"[")


_RAW = "raw"
"""A tree node read as raw JSON (an array, or a value two readings share)."""


def structs(
    columns: list[Reading],
) -> tuple[type, type, dict[str, tuple[tuple[str, ...], tuple[str | int, ...] | None]]]:
    """The fast path's struct (no unknown field) and the second look's (unknown fields
    skipped), nested per dotted path; and per column the attributes to its value and, for a
    value read as raw JSON, the steps left to pick it by."""
    tree: dict[str, Any] = {}
    for c in columns:
        cut = next((k for k, s in enumerate(c.steps) if type(s) is int), None)
        names = c.steps if cut is None else c.steps[: max(cut, 1)]
        node = tree
        for step in names[:-1]:
            nxt = node.setdefault(step, {})
            if not isinstance(nxt, dict):  # through a leaf: read raw from there
                node[step] = _RAW
                break
            node = nxt
        else:
            leaf = names[-1]
            if cut is not None or leaf in node:
                node[leaf] = _RAW
            else:
                node[leaf] = c
    reads: dict[str, tuple[tuple[str, ...], tuple[str | int, ...] | None]] = {}
    for c in columns:
        node = tree
        for depth, step in enumerate(c.steps):
            node = node[step]
            if node is _RAW:
                reads[c.name] = (tuple(c.steps[: depth + 1]), tuple(c.steps[depth + 1 :]))  # type: ignore[arg-type]
                break
            if not isinstance(node, dict):
                reads[c.name] = (tuple(c.steps), None)  # type: ignore[arg-type]
                break

    def build(node: dict[str, Any], forbid: bool, name: str) -> tuple[type, bool]:
        fields: list[tuple[Any, ...]] = []
        optional = True
        for key, sub in node.items():
            if isinstance(sub, dict):
                kind, all_optional = build(sub, forbid, f"{name}_{key}")
                if all_optional:
                    fields.append((key, kind | None, None))
                else:
                    fields.append((key, kind))
                    optional = False
            elif sub is _RAW:
                fields.append((key, msgspec.Raw | None, None))
            elif sub.nullable:
                fields.append((key, sub.struct_type(), None))
            else:
                fields.append((key, sub.struct_type()))
                optional = False
        fields.sort(key=len)  # required fields first, as a struct's signature needs
        struct = msgspec.defstruct(name, fields, forbid_unknown_fields=forbid, gc=False)
        return struct, optional

    return build(tree, True, "Exact")[0], build(tree, False, "Lenient")[0], reads


def getter(
    names: tuple[str, ...], rest: tuple[str | int, ...] | None
) -> Callable[[list[Any]], list[Any]]:
    """Values at ``names`` of each struct (None under a None); past them, for a value read as
    raw JSON, the value ``rest`` picks from it (:data:`_RAW_BAD` if the path does not
    follow)."""
    picks = [attrgetter(name) for name in names]

    def get(structs: list[Any]) -> list[Any]:
        values = list(map(picks[0], structs))  # a struct is never None
        for pick in picks[1:]:
            if None in values:
                values = [None if v is None else pick(v) for v in values]
            else:
                values = list(map(pick, values))
        if rest is not None:
            values = [_pick_raw(v, rest) for v in values]
        return values

    return get


_RAW_BAD = object()


def _pick_raw(raw: Any, steps: tuple[str | int, ...]) -> Any:
    if raw is None:
        return None
    if type(raw) is not msgspec.Raw:  # a leaf typed raw because two readings share it
        return _RAW_BAD
    try:
        here = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _RAW_BAD
    for step in steps:
        if here is None:
            return None
        if type(step) is int:
            if type(here) is not list:
                return _RAW_BAD
            if step >= len(here):
                return None
            here = here[step]
        else:
            if type(here) is not dict:
                return _RAW_BAD
            here = here.get(step)
    return here


def as_column(
    c: Reading, raw: list[Any], exact: bool
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """``raw`` (a column's values as the fast path read them) as the column, its null mask
    and a mask of values refused here (each then classified). ``exact``: the values were
    picked from raw JSON, so the exact checks apply to each."""
    bad = None
    if exact:
        bad = np.zeros(len(raw), dtype=bool)
        checked: list[Any] = []
        for k, v in enumerate(raw):
            if (
                v is _RAW_BAD
                or (v is None and not c.nullable)
                or (v is not None and (c.type_problem(v) or c.range_problem(v)))
            ):
                bad[k] = True
                v = None
            checked.append(None if v is None else c.final(v))
        raw = checked
        if not bad.any():
            bad = None
    if c.type is ColumnType.STRING:
        return np.array(raw, dtype=object), None, bad
    null = None
    if (exact or c.nullable or c.soft) and None in raw:  # else the fast path read no null
        null = np.array([v is None for v in raw])
    if c.type is not ColumnType.TIMESTAMP:
        if null is not None:
            fill = FILL[c.type]
            raw = [fill if v is None else v for v in raw]
        return np.array(raw, dtype=DTYPES[c.type]), null, bad
    if exact:  # already epoch ms, in range
        return np.array([0 if v is None else v for v in raw], dtype=np.int64), null, bad
    if null is None:
        column, refused = column_to_ms(raw, c.fmt, c.pattern, c.zone)
    else:
        some = np.flatnonzero(~null)
        part, refused_part = column_to_ms([raw[i] for i in some], c.fmt, c.pattern, c.zone)
        column = np.zeros(len(raw), dtype=np.int64)
        column[some] = part
        refused = None
        if refused_part is not None:
            refused = np.zeros(len(raw), dtype=bool)
            refused[some] = refused_part
    outside = (column < EVENT_TIME_MIN_MS) | (column >= EVENT_TIME_MAX_MS)
    if null is not None:
        outside &= ~null
    if refused is not None:
        outside |= refused
    if outside.any():
        bad = outside if bad is None else (bad | outside)
    return column, null, bad
