"""`key_format`: a key in the Confluent wire format, decoded, then typed as `key` says."""

from __future__ import annotations

import pytest

from eosflow.schema.declaration import DeclarationError, parse_schema
from eosflow.schema.record import key_check

COLUMNS = [{"name": "id", "type": "text"}]


def test_a_decoded_key_is_typed_even_as_text_or_bytes():
    for key, declared in (("text", "text"), ("bytes", "bytea"), ("bigint", "bigint"), ("jsonb", "jsonb")):
        schema = parse_schema({"key": key, "key_format": "avro", "columns": COLUMNS}, "t")
        assert schema.key_type.declared == declared and schema.key_format == "avro"
    plain = parse_schema({"key": "text", "columns": COLUMNS}, "t")
    assert plain.key_type is None and plain.key_format is None and "key_format" not in plain.canonical


def test_an_unknown_key_format_is_refused():
    with pytest.raises(DeclarationError, match="key_format 'json' unknown; one of \\['avro', 'protobuf'\\]"):
        parse_schema({"key_format": "json", "columns": COLUMNS}, "t")


def test_a_decoded_keys_datum_is_held_to_the_key_type():
    bigint = parse_schema({"key": "bigint", "key_format": "avro", "columns": COLUMNS}, "t").key_type
    decoded = {b"k1": (None, 7), b"k2": (None, "7"), b"k3": ("not Avro: unknown schema id 9", None)}
    check = key_check(bigint, decoded.__getitem__)
    assert check(b"k1") == (None, 7)
    assert check(b"k2") == ("mistyped key (expected 64-bit integer)", None)  # a string datum is no long
    assert check(b"k3") == ("mistyped key (not Avro: unknown schema id 9)", None)
    assert check(None) == (None, None)
