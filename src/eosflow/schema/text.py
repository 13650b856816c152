"""Values with no fields of their own: `format: text` and `format: bytes`.

A text value is UTF-8 (else ``not UTF-8``, as for JSON). Without `text_pattern` the whole value is
the one declared column's; with it, the pattern (run by RE2: eosflow.schema.patterns) must match
the whole value (else ``not matching text_pattern``) and each column takes the named group of its
name (a group that took no part is a missing field). A column of a type whose text is itself
(text, uuid, timestamptz, date) takes the text as it is; any other type reads it as its JSON
spelling, as a typed Kafka key is read (eosflow.schema.record.key_check): "17" is a bigint, "true"
a boolean, "1.50" a numeric. Text that is not such a spelling stays text, which the column's type
then refuses as mistyped.

A bytes value lands byte for byte in its one bytea column. Either way the result is the document
the declared columns' checks read (eosflow.schema.record), so they hold as for JSON.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal

from eosflow.schema.declaration import Column
from eosflow.schema.patterns import Pattern

NOT_MATCHING = "not matching text_pattern"
# The types whose text form is the text itself (as record._TEXTUAL_KEYS).
_TEXTUAL = frozenset({"text", "uuid", "timestamptz", "date"})
_JSON = json.JSONDecoder(parse_float=Decimal)


def _spelled(text: str) -> object:
    """The JSON value `text` spells (exact decimals), or the text itself when it spells none."""
    try:
        value = _JSON.decode(text.strip())
    except (ValueError, RecursionError):
        return text
    return text if value is None else value


def _reader(column: Column) -> Callable[[str], object]:
    # A text column that was another type (`text_from`) reads a value as that type did, so its text is
    # the stored value's (eosflow.schema.text_from): "1.50" read for a double is 1.5, as the ALTER writes it.
    declared = column.type.text_from or column.type.declared
    return (lambda text: text) if declared in _TEXTUAL else _spelled


class TextDecoder:
    """`format: text`: a value -> (None, {column: value}) or (the reason, None)."""

    def __init__(self, columns: tuple[Column, ...], pattern: Pattern | None) -> None:
        self.pattern = pattern
        self.readers = tuple((c.name, _reader(c)) for c in columns)

    def __call__(self, value: bytes) -> tuple[str | None, dict | None]:
        try:
            text = value.decode("utf-8")
        except UnicodeDecodeError:
            return "not UTF-8", None
        if self.pattern is None:
            ((name, read),) = self.readers
            return None, {name: read(text)}
        groups = self.pattern.fullmatch_groups(text)  # RE2: linear in the text (eosflow.schema.patterns)
        if groups is None:
            return NOT_MATCHING, None
        return None, {name: None if (g := groups[name]) is None else read(g) for name, read in self.readers}


class BytesDecoder:
    """`format: bytes`: a value -> (None, {column: the bytes})."""

    def __init__(self, columns: tuple[Column, ...]) -> None:
        (self.name,) = (c.name for c in columns)

    def __call__(self, value: bytes) -> tuple[str | None, dict | None]:
        return None, {self.name: value}
