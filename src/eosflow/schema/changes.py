"""A change stream's records read as changes: Debezium's envelope, or a keyed topic's latest value per key.

Each record becomes the declared columns of its row image and the change's own (declaration.CHANGE_COLUMNS):
`change_op` (c, r, u, d, t, or `-` for a tombstone), `change_lsn` (Debezium's `source.lsn`, the change's place
in Postgres' WAL), `change_ts` (the source's time) and `change_unchanged` (columns Debezium sent its TOAST
placeholder for: not values, the key's previous change holds them). What is not a change is a rejected row
with a reason. docs/DESIGN.md, "Change streams".

The image is held to the declaration by the same check as a JSON document (eosflow.schema.record), after
Debezium's JSON value forms are read as the declared types take them (DEBEZIUM_FORMS): a numeric as its
string (decimal.handling.mode=string), jsonb as its JSON text (io.debezium.data.Json), a date as days since
1970 (io.debezium.time.Date), a timestamptz as microseconds since 1970 (MicroTimestamp) or its ISO text
(ZonedTimestamp), bytea as base64 (binary.handling.mode=base64).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from eosflow.schema.avro import RegistryConfig
from eosflow.schema.debezium_values import (  # noqa: F401  (OPS, PLACEHOLDER: what importers of this module name)
    _EPOCH,
    _MAX_LSN,
    OPS,
    PLACEHOLDER,
    TOMBSTONE,
    debezium_forms,
)
from eosflow.schema.declaration import Column, RecordFormat, RecordSchema

Result = tuple[str | None, list | None]


def declared(schema: RecordSchema) -> tuple[Column, ...]:
    """The columns a change's image fills: the declared ones, without the change's own."""
    return tuple(c for c in schema.columns if c.meta != "change")


class ChangeCheck:
    """`check(key, value)` -> (error, typed values of every schema column, the change's last) per record."""

    def __init__(
        self,
        schema: RecordSchema,
        max_value_bytes: int,
        registry: RegistryConfig | None,
        *,
        compiled: bool = True,
        give_up_after: int | None = 1_000,
    ) -> None:
        from eosflow.schema.changes_compiled import compile_changes
        from eosflow.schema.record import RecordCheck, _decoder, parse_object

        self.schema = schema
        self.max_value_bytes = max_value_bytes
        image = dataclasses.replace(schema, columns=declared(schema), changes=None, format=RecordFormat.JSON)
        self.full = RecordCheck(image, max_value_bytes, compiled=False)
        # A delete's image (and an update's with TOAST placeholders) may hold only the key: the rest optional.
        key = schema.primary_key
        loose = tuple(c if c.name in key else dataclasses.replace(c, required=False) for c in image.columns)
        self.loose = RecordCheck(dataclasses.replace(image, columns=loose), max_value_bytes, compiled=False)
        self.columns = image.columns
        self.width = len(image.columns)
        self.key_columns = tuple(c for c in image.columns if c.name in schema.primary_key)
        if schema.format == "json":
            exact = schema.exact_decimals

            def decode(value: bytes) -> tuple[str | None, dict | None]:
                try:
                    text = value.decode("utf-8")
                except UnicodeDecodeError:
                    return "not UTF-8", None
                doc = parse_object(text, exact)
                return ("not JSON", None) if doc is None else (None, doc)

            self.decode: Callable[[bytes], tuple[str | None, dict | None]] = decode
        else:
            self.decode = _decoder(dataclasses.replace(schema, changes=None), registry)
        self.check = self._debezium if schema.changes == "debezium" else self._keyed
        # Debezium's JSON envelope decoded and typed in C first (eosflow.schema.changes_compiled), which only
        # ever answers "valid, typed so"; compiled=False runs the Python check alone, the reference.
        self.fast = compile_changes(schema, image.columns) if compiled else None
        if self.fast is not None:
            self.check = self._compiled
        self._tried, self.fallbacks, self._give_up_after = 0, 0, give_up_after

    def __call__(self, key: bytes | None, value: bytes | None, headers: str | None = None) -> Result:
        error, typed = self.check(key, value)
        if typed is not None:
            typed.append(_old_key(headers, self.key_columns) if typed[-1] and typed[-4] == "c" else None)
        return error, typed

    # --- Debezium

    def _compiled(self, key: bytes | None, value: bytes | None) -> Result:
        fast = self.fast
        assert fast is not None  # the check only when the envelope compiled
        if value is None:
            typed = fast.tombstone(key) if key else None
        else:
            typed = fast.envelope(value) if len(value) <= self.max_value_bytes else None
        self._tried += 1
        if typed is not None:
            return None, typed
        # As RecordCheck: a topic the fast path mostly leaves to the Python check (TOAST placeholders, another
        # connector's fields) would pay for both; after this many records, it is not tried again.
        self.fallbacks += 1
        limit = self._give_up_after
        if limit is not None and self._tried >= limit and 2 * self.fallbacks > self._tried:
            self.check = self._debezium
        return self._debezium(key, value)

    def _debezium(self, key: bytes | None, value: bytes | None) -> Result:
        if value is None:  # the tombstone after a delete: for log compaction, it changes nothing
            return None, [*self._key_from(key), TOMBSTONE, None, None, None]
        if len(value) > self.max_value_bytes:
            return f"oversized: {len(value)} bytes > {self.max_value_bytes}", None
        error, decoded = self.decode(value)
        if error is not None:
            return error, None
        assert decoded is not None  # decode names an error or returns the document
        doc: dict[str, Any] = decoded
        if isinstance(doc.get("payload"), dict) and "schema" in doc:  # JsonConverter, schemas.enable
            doc = doc["payload"]
        op = doc.get("op")
        if op is None:
            return "not a Debezium change: no op", None
        if op not in OPS:
            return f"not a Debezium change: op {str(op)[:20]!r} is none of c, r, u, d, t", None
        found = doc.get("source")
        source = found if isinstance(found, dict) else {}
        lsn, error = _lsn(source.get("lsn"))
        if error is not None:
            return error, None
        ts = _millis(source.get("ts_ms", doc.get("ts_ms")))
        if op == "t":
            return None, [None] * self.width + [op, lsn, ts, None]
        side = "before" if op == "d" else "after"
        image = doc.get(side)
        if not isinstance(image, dict):
            return f"not a Debezium change: op {op} without {side}", None
        return self._image(image, op, lsn, ts)

    def _image(self, image: dict, op: str, lsn: int | None, ts: datetime | None) -> Result:
        known = self.schema.image_fields
        if known is not None and not known.issuperset(image):
            new = sorted(str(k) for k in image if k not in known)[:5]
            return (
                f"not declared yet: field(s) {new} of the table are not in its declaration (a column added "
                "in the source after the last discovery): run `eosflow discover`, then replay this range"
            ), None
        image, unchanged = debezium_forms(image, self.columns)
        for c in self.key_columns:
            if image.get(c.name) is None:
                return f"not a change of a row: primary key column {c.name} is missing or null", None
        check = self.loose if op == "d" or unchanged else self.full
        typed = check.typed(image)
        if typed is None:
            return check.first_error(image), None
        return None, [*typed, op, lsn, ts, unchanged or None]

    def _key_from(self, key: bytes | None) -> list:
        """A tombstone's key columns from Debezium's key (a JSON object of the key, its schema block or not);
        NULLs where the key does not give them (a tombstone changes nothing either way)."""
        values: list = [None] * self.width
        try:
            doc = json.loads(key) if key else None
        except (ValueError, RecursionError):  # RecursionError: nested deeper than json reads
            doc = None
        if isinstance(doc, dict) and isinstance(doc.get("payload"), dict):
            doc = doc["payload"]
        if isinstance(doc, dict):
            typed = self.loose.typed(debezium_forms(doc, self.columns)[0])
            if typed is not None:
                names = [c.name for c in self.columns]
                for c in self.key_columns:
                    values[names.index(c.name)] = typed[names.index(c.name)]
        return values

    # --- keyed topics

    def _keyed(self, key: bytes | None, value: bytes | None) -> Result:
        if key is None:
            return "not a change of a row: a keyed change stream's record has no key", None
        keys, error = self._key_values(key)
        if error is not None:
            return error, None
        if value is None:
            return self._image(keys, "d", None, None)
        if len(value) > self.max_value_bytes:
            return f"oversized: {len(value)} bytes > {self.max_value_bytes}", None
        error, doc = self.decode(value)
        if error is not None:
            return error, None
        assert doc is not None  # decode names an error or returns the document
        return self._image({**doc, **keys}, "u", None, None)

    def _key_values(self, key: bytes) -> tuple[dict, str | None]:
        """The primary key from the record's key: one column's value as its text (JSON spelling for numbers
        and booleans), or a JSON object of the key columns."""
        try:
            text = key.decode("utf-8")
        except UnicodeDecodeError:
            return {}, "not a change of a row: the key is not UTF-8"
        if len(self.key_columns) == 1 and not text.lstrip().startswith("{"):
            (column,) = self.key_columns
            if column.type.declared in ("text", "uuid", "timestamptz", "date"):
                return {column.name: text}, None
            try:
                return {column.name: json.loads(text)}, None
            except (ValueError, RecursionError):
                return {}, f"not a change of a row: key {text[:40]!r} is not a {column.type.declared}"
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError):
            doc = None
        if not isinstance(doc, dict):
            names = [c.name for c in self.key_columns]
            return {}, f"not a change of a row: the key is not a JSON object of {names}"
        return {c.name: doc.get(c.name) for c in self.key_columns}, None


OLD_KEY_HEADER = "__debezium.oldkey"


def _old_key(headers: str | None, key_columns: tuple[Column, ...]) -> dict | None:
    """The old primary key Debezium puts in a header of the create that follows a primary-key update, as
    {column: value}; None without one. Only asked for when the create left columns unchanged."""
    if not headers or OLD_KEY_HEADER not in headers:
        return None
    try:
        found = [h["value"] for h in json.loads(headers) if h.get("key") == OLD_KEY_HEADER]
        doc = json.loads(found[-1]) if found and found[-1] else None
    except (ValueError, TypeError, KeyError, RecursionError):
        return None
    if isinstance(doc, dict) and isinstance(doc.get("payload"), dict):
        doc = doc["payload"]
    if not isinstance(doc, dict) or any(doc.get(c.name) is None for c in key_columns):
        return None
    return {c.name: doc[c.name] for c in key_columns}


def _lsn(raw: object) -> tuple[int | None, str | None]:
    if raw is None:
        return None, None
    if type(raw) is int and 0 <= raw <= _MAX_LSN:
        return raw, None
    return None, f"not a Debezium change: source.lsn {str(raw)[:30]!r} is not a WAL position (0 to 2^63-1)"


def _millis(raw: object) -> datetime | None:
    if type(raw) is not int:
        return None
    try:
        return _EPOCH + timedelta(milliseconds=raw)
    except OverflowError:
        return None
