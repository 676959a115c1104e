"""The tokens of Sluice's expression texts (``where:`` filters and derived columns): one
tokenizer, so both read numbers, quoted text, operators and names alike."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = ["COMPARE", "KEYWORDS", "Token", "shown", "tokenize"]

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<number>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)
      | (?P<text>'(?:[^']|'')*'|"(?:[^"]|"")*")
      | (?P<op><=|>=|==|!=|<>|=|<|>)
      | (?P<punct>[(),])
      | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
    )""",
    re.VERBOSE,
)
KEYWORDS = frozenset({"and", "or", "not", "in", "is", "null"})
"""Words read in any case and never as a column's name."""
COMPARE = {"=": "=", "==": "=", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
"""Each comparison operator as written -> the one it means."""


@dataclass(frozen=True)
class Token:
    kind: str  # number, text, op, punct, word, end
    value: Any
    at: int  # character position, from 0


def tokenize(text: str, error: type[Exception]) -> list[Token]:
    """``text``'s tokens, ending with an ``end`` token; an unexpected character raises
    ``error`` naming it and its position (from 1)."""
    out: list[Token] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            at = pos + len(text[pos:]) - len(text[pos:].lstrip())
            raise error(f"unexpected character {text[at]!r} at {at + 1}")
        kind = match.lastgroup
        assert kind is not None
        raw = match.group(kind)
        at = match.start(kind)
        if kind == "number":
            value: Any = float(raw) if any(c in raw for c in ".eE") else int(raw)
        elif kind == "text":
            value = raw[1:-1].replace(raw[0] * 2, raw[0])
        elif kind == "op":
            value = COMPARE[raw]
        elif kind == "word" and raw.lower() in KEYWORDS:
            value = raw.lower()
        else:
            value = raw
        out.append(Token(kind, value, at))
        pos = match.end()
    out.append(Token("end", None, len(text)))
    return out


def shown(token: Token) -> str:
    """A token as the user wrote it, quoted unless it is a number."""
    if token.kind == "number":
        return str(token.value)
    return f"'{token.value}'"
