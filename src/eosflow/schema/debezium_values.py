"""Debezium's JSON value forms and envelope constants: what the change check (eosflow.schema.changes) and its
compiled fast path (eosflow.schema.changes_compiled) both read values with, in a module of their own so
neither imports the other's."""

from __future__ import annotations

import base64
import binascii
import json
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING

from eosflow.schema.declaration import Column

if TYPE_CHECKING:
    from eosflow.schema.types import Value

OPS = ("c", "r", "u", "d", "t")
TOMBSTONE = "-"
PLACEHOLDER = "__debezium_unavailable_value"
_PLACEHOLDER_B64 = base64.b64encode(PLACEHOLDER.encode()).decode()
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MAX_LSN = 2**63 - 1
_EXACT_JSON = json.JSONDecoder(parse_float=Decimal)


def debezium_forms(image: dict, columns: tuple[Column, ...]) -> tuple[dict, list[str]]:
    """The image with Debezium's JSON value forms read as the declared types take them, and the columns
    that held the TOAST placeholder (left out: the key's previous change holds their value)."""
    out = dict(image)
    unchanged: list[str] = []
    for c in columns:
        name = c.path[0] if c.path and isinstance(c.path[0], str) else c.name
        if name not in out:
            continue
        value = out[name]
        if _is_placeholder(value):
            unchanged.append(c.name)
            del out[name]
            continue
        converted = _form(c.type.declared, value)
        if converted is not value:
            out[name] = converted
    return out, unchanged


def _is_placeholder(value: object) -> bool:
    if type(value) is str:
        return value in (PLACEHOLDER, _PLACEHOLDER_B64)
    return type(value) is list and len(value) == 1 and value[0] == PLACEHOLDER


def _form(declared: str, value: Value) -> object:
    """One value in Debezium's form, as the declared type takes it; the value itself when it is not one."""
    t = type(value)
    if declared.startswith("numeric") and t is str:
        try:
            number = Decimal(value)
        except InvalidOperation:
            return value
        return number if number.is_finite() else value
    if declared == "jsonb" and t is str:
        try:
            return _EXACT_JSON.decode(
                value
            )  # one decoder for all: json.loads(parse_float=) builds one a call
        except (ValueError, RecursionError):  # RecursionError: nested deeper than json reads, not JSON either
            return value
    if declared == "date" and t is int:
        try:
            return (date(1970, 1, 1) + timedelta(days=value)).isoformat()
        except OverflowError:
            return value
    if declared == "timestamptz" and t is int:
        try:
            return (_EPOCH + timedelta(microseconds=value)).isoformat()
        except OverflowError:
            return value
    if declared == "bytea" and t is str:
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            return value
    return value
