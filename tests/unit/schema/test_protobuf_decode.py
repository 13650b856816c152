"""Protobuf values (Confluent wire format) decoded to the JSON-like records eosflow checks, no stack.

The test schemas are .proto text compiled by grpc_tools' protoc at test time; the registry is a
SchemaRegistry whose get_json answers from a dict. confluent-kafka's own framing code is the
reference the wire functions are checked against. The real registry and confluent-kafka's
serializer are in tests/integration/test_protobuf_registry.py.
"""

from __future__ import annotations

import base64
import io
import math
import os
import pickle
import tempfile
import uuid

import grpc_tools
import pytest
from confluent_kafka.schema_registry.common.protobuf import _create_index_array
from confluent_kafka.schema_registry.common.serde import SchemaId
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from grpc_tools import protoc
from hypothesis import given
from hypothesis import strategies as st
from pyspark import cloudpickle

from eosflow.schema import protobuf
from eosflow.schema.avro import RegistryConfig, RegistryUnavailableError, SchemaRegistry
from eosflow.schema.protobuf import NO_HEADER, ProtobufDecoder, encode, to_json_like
from eosflow.schema.protobuf_wire import WireError, header, split, varint

ADDRESS = """syntax = "proto3";
package pbtest.common;
message Address { string city = 1; repeated string lines = 2; }
"""

ORDERS = """syntax = "proto3";
package pbtest;
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/wrappers.proto";
import "google/protobuf/struct.proto";
import "pbtest_common_address.proto";

enum Status { STATUS_UNKNOWN = 0; ACTIVE = 1; CLOSED = 2; }

message Order {
  int64 id = 1;
  string customer = 2;
  double total = 3;
  float ratio = 4;
  bool paid = 5;
  bytes blob = 6;
  Status status = 7;
  repeated string tags = 8;
  repeated Line lines = 9;
  map<string, int64> counts = 10;
  map<int32, Line> by_number = 11;
  map<bool, string> flags = 12;
  google.protobuf.Timestamp placed_at = 13;
  google.protobuf.Duration took = 14;
  google.protobuf.StringValue note = 15;
  google.protobuf.Int64Value discount = 16;
  google.protobuf.BoolValue gift = 17;
  google.protobuf.DoubleValue weight = 18;
  google.protobuf.BytesValue raw = 19;
  google.protobuf.Struct attrs = 20;
  google.protobuf.Value extra = 21;
  google.protobuf.ListValue items = 22;
  optional int32 maybe = 23;
  oneof payment { string card = 24; int64 voucher = 25; }
  Line first = 26;
  pbtest.common.Address ship_to = 27;
  uint64 big = 28;
  sint32 delta = 29;
  repeated Status history = 30;

  message Line { string sku = 1; int32 qty = 2; Line child = 3; }
}

message Other { string name = 1; }
"""

LEGACY = """syntax = "proto2";
package pbtest.legacy;
message Old { optional string s = 1; optional int32 n = 2 [default = 7]; required int32 r = 3; }
"""

# Every proto3 field without presence, at its default: what an empty Order decodes to.
DEFAULTS = {
    "id": 0,
    "customer": "",
    "total": 0.0,
    "ratio": 0.0,
    "paid": False,
    "blob": b"",
    "status": "STATUS_UNKNOWN",
    "tags": [],
    "lines": [],
    "counts": {},
    "by_number": {},
    "flags": {},
    "big": 0,
    "delta": 0,
    "history": [],
}


def compile_protos(files: dict[str, str]) -> descriptor_pb2.FileDescriptorSet:
    """.proto texts by file name -> their FileDescriptorSet, well-known types included, by protoc."""
    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    with tempfile.TemporaryDirectory() as folder:
        for name, text in files.items():
            with open(os.path.join(folder, name), "w") as out:
                out.write(text)
        target = os.path.join(folder, "out.pb")
        args = [
            "protoc",
            f"-I{folder}",
            f"-I{include}",
            "--include_imports",
            f"--descriptor_set_out={target}",
        ]
        assert protoc.main([*args, *files]) == 0, files
        with open(target, "rb") as compiled:
            return descriptor_pb2.FileDescriptorSet.FromString(compiled.read())


def message_classes(files: dict[str, str]) -> dict[str, type]:
    """The message classes of the compiled files, by full name, from a pool of their own."""
    pool = descriptor_pool.DescriptorPool()
    compiled = compile_protos(files)
    for file in compiled.file:
        pool.Add(file)
    return {
        d.full_name: message_factory.GetMessageClass(d)
        for file in compiled.file
        for d in _all_messages(pool.FindFileByName(file.name).message_types_by_name.values())
    }


def _all_messages(descriptors):
    for d in descriptors:
        yield d
        yield from _all_messages(d.nested_types)


FILES = {"pbtest_common_address.proto": ADDRESS, "orders.proto": ORDERS, "legacy.proto": LEGACY}
CLASSES = message_classes(FILES)
Order, Line, Other = CLASSES["pbtest.Order"], CLASSES["pbtest.Order.Line"], CLASSES["pbtest.Other"]
Old = CLASSES["pbtest.legacy.Old"]
FILE_PROTOS = {f.name: f for f in compile_protos(FILES).file}


def b64(name: str) -> str:
    """A file as confluent-kafka-python registers it: base64 of its serialized FileDescriptorProto."""
    return base64.standard_b64encode(FILE_PROTOS[name].SerializeToString()).decode()


def full_order() -> Order:
    order = Order(id=-(2**63), customer="Zoë", total=12.5, ratio=0.1, paid=True, blob=b"\x00\xff")
    order.status = 2
    order.tags.extend(["a", "b"])
    order.lines.add(sku="x", qty=3).child.sku = "inner"
    order.counts["k"] = 2**40
    order.by_number[7].sku = "seven"
    order.flags[True] = "yes"
    order.placed_at.FromJsonString("2026-03-01T12:34:56.789Z")
    order.took.FromJsonString("1.500s")
    order.note.value = "n"
    order.discount.value = 0  # a set wrapper holding the default is still there
    order.gift.value = False
    order.weight.value = 2.25
    order.raw.value = b"r"
    order.attrs.update({"a": 1, "b": [True, None, "s"], "c": {"d": 1.5}})
    order.extra.string_value = "e"
    order.items.extend([1, "two"])
    order.maybe = 0
    order.voucher = 5
    order.first.qty = 1
    order.ship_to.city = "Gent"
    order.big = 2**64 - 1
    order.delta = -3
    order.history.extend([1, 99])
    return order


FULL = {
    "id": -(2**63),
    "customer": "Zoë",
    "total": 12.5,
    "ratio": 0.10000000149011612,  # a float32, widened
    "paid": True,
    "blob": b"\x00\xff",
    "status": "CLOSED",
    "tags": ["a", "b"],
    "lines": [{"sku": "x", "qty": 3, "child": {"sku": "inner", "qty": 0}}],
    "counts": {"k": 2**40},
    "by_number": {"7": {"sku": "seven", "qty": 0}},
    "flags": {"true": "yes"},
    "placed_at": "2026-03-01T12:34:56.789Z",
    "took": "1.500s",
    "note": "n",
    "discount": 0,
    "gift": False,
    "weight": 2.25,
    "raw": b"r",
    "attrs": {"a": 1.0, "b": [True, None, "s"], "c": {"d": 1.5}},
    "extra": "e",
    "items": [1.0, "two"],
    "maybe": 0,
    "voucher": 5,
    "first": {"sku": "", "qty": 1},
    "ship_to": {"city": "Gent", "lines": []},
    "big": 2**64 - 1,
    "delta": -3,
    "history": ["ACTIVE", 99],
}


class FakeRegistry(SchemaRegistry):
    """get_json from a dict of path -> answer (an exception is raised); what was asked, in order."""

    def __init__(self, answers: dict) -> None:
        super().__init__(RegistryConfig(f"http://fake-{uuid.uuid4().hex[:8]}.invalid:1"))
        self.answers = answers
        self.asked: list[str] = []

    def get_json(self, path: str) -> dict | None:
        self.asked.append(path)
        answer = self.answers.get(path)
        if isinstance(answer, Exception):
            raise answer
        return answer


def decoder_for(answers: dict) -> tuple[ProtobufDecoder, FakeRegistry]:
    fake = FakeRegistry(answers)
    decoder = ProtobufDecoder(fake.config)
    decoder.registry = fake
    return decoder, fake


ADDRESS_REF = [{"name": "pbtest_common_address.proto", "subject": "pbtest-address", "version": 1}]


def orders_registry(root: str, address: str, schema_id: int = 1) -> dict:
    return {
        f"/schemas/ids/{schema_id}": {"schema": root, "schemaType": "PROTOBUF", "references": ADDRESS_REF},
        "/subjects/pbtest-address/versions/1": {"schema": address, "schemaType": "PROTOBUF"},
    }


# --- the framing ------------------------------------------------------------------------------


@given(
    schema_id=st.integers(0, 2**32 - 1),
    indexes=st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=100),
    body=st.binary(max_size=20),
)
def test_message_indexes_round_trip_and_are_framed_as_confluent_kafka_frames_them(schema_id, indexes, body):
    framed = header(schema_id, indexes)
    assert framed == SchemaId("PROTOBUF", schema_id, None, indexes).id_to_bytes()
    assert split(framed + body) == (schema_id, tuple(indexes), body)
    read = SchemaId("PROTOBUF")
    read.from_bytes(io.BytesIO(framed + body))
    assert (read.id, read.message_indexes) == (schema_id, indexes)


def test_the_first_message_is_a_single_zero_byte_and_a_count_of_zero_reads_as_it():
    assert header(7) == b"\x00\x00\x00\x00\x07\x00"
    assert split(b"\x00\x00\x00\x00\x07\x00\x08\x01") == (7, (0,), b"\x08\x01")
    assert (
        header(7, [1, 0])
        == b"\x00\x00\x00\x00\x07" + varint(2) + varint(1) + varint(0)
        == (b"\x00\x00\x00\x00\x07\x04\x02\x00")
    )


BAD_ARRAY = "not Protobuf: bad message-index array after schema id 7 "


@pytest.mark.parametrize(
    ("after_header", "reason"),
    [
        (b"", "(truncated varint)"),
        (b"\x80", "(truncated varint)"),
        (b"\x04\x02", "(truncated varint)"),  # a count of 2, one index
        (b"\xff" * 10 + b"\x01", "(a varint longer than 10 bytes)"),
        (b"\x01", "(a count of -1, not 1 to 100)"),
        (varint(101), "(a count of 101, not 1 to 100)"),
        (varint(2**62), f"(a count of {2**62}, not 1 to 100)"),
        (varint(1) + varint(-2), "(a negative index -2)"),
    ],
)
def test_a_message_index_array_that_cannot_be_read_is_rejected_not_raised(after_header, reason):
    value = b"\x00\x00\x00\x00\x07" + after_header
    with pytest.raises(WireError) as raised:
        split(value)
    assert str(raised.value) == BAD_ARRAY + reason
    decoder, fake = decoder_for({})
    assert decoder(value) == (BAD_ARRAY + reason, None)
    assert fake.asked == []  # no registry call for a value that cannot be read


@pytest.mark.parametrize("value", [b"", b"\x00\x00\x00\x01", b"\x01\x00\x00\x00\x01\x00", b"{}"])
def test_a_value_without_the_header_is_rejected(value):
    assert NO_HEADER == "not Protobuf: no Confluent wire-format header (magic byte 0 and a 4-byte schema id)"
    assert decoder_for({})[0](value) == (NO_HEADER, None)


def test_encode_frames_a_message():
    order = Order(id=1)
    assert encode(9, order) == b"\x00\x00\x00\x00\x09\x00" + order.SerializeToString()
    assert encode(9, order, (1, 0)) == header(9, [1, 0]) + order.SerializeToString()
    with pytest.raises(ValueError, match="non-empty path"):
        header(9, [])


# --- the message as a JSON-like dict ------------------------------------------------------------


def roundtrip(message) -> dict:
    return to_json_like(type(message).FromString(message.SerializeToString()))


def test_every_field_maps_to_its_json_like_value():
    assert roundtrip(full_order()) == FULL


def test_fields_without_presence_appear_with_their_defaults_and_unset_ones_with_presence_do_not():
    assert roundtrip(Order()) == DEFAULTS  # no message, wrapper, optional or oneof member


def test_of_a_oneof_only_the_member_set_appears():
    assert roundtrip(Order(card="4111"))["card"] == "4111"
    assert "voucher" not in roundtrip(Order(card="4111"))
    assert roundtrip(Order(card="")) == {**DEFAULTS, "card": ""}  # set to its default: still set


def test_a_value_that_is_null_or_absent_and_struct_numbers():
    order = Order()
    order.extra.null_value = 0
    order.attrs.update({"n": None, "nan": math.nan})
    decoded = roundtrip(order)
    assert decoded["extra"] is None and decoded["attrs"]["n"] is None
    assert math.isnan(decoded["attrs"]["nan"])  # a jsonb column then refuses it, as for Avro


def test_an_enum_number_the_schema_does_not_name_is_the_number():
    assert roundtrip(Order(status=42))["status"] == 42


def test_proto2_fields_have_presence_and_their_defaults_are_not_filled_in():
    assert roundtrip(Old(r=1)) == {"r": 1}
    assert roundtrip(Old(r=1, n=7, s="x")) == {"r": 1, "n": 7, "s": "x"}


def test_nesting_deeper_than_the_limit_is_a_reason():
    order = Order()
    line = order.first
    for _ in range(protobuf.MAX_DEPTH + 1):
        line = line.child
    line.qty = 1
    with pytest.raises(ValueError, match=f"^nested deeper than {protobuf.MAX_DEPTH}$"):
        to_json_like(order)


# --- the decoder, end to end against a registry ------------------------------------------------


@pytest.mark.parametrize(
    ("root", "address"),
    [
        pytest.param(b64("orders.proto"), b64("pbtest_common_address.proto"), id="base64"),
        pytest.param(ORDERS, ADDRESS, id="text"),
        pytest.param(ORDERS, b64("pbtest_common_address.proto"), id="text-importing-base64"),
    ],
)
def test_a_record_decodes_with_its_writer_schema_as_base64_or_text(root, address):
    decoder, fake = decoder_for(orders_registry(root, address))
    for _ in range(3):
        assert decoder(encode(1, full_order())) == (None, FULL)
        assert decoder(encode(1, Order())) == (None, DEFAULTS)
    line_index = tuple(_create_index_array(Line.DESCRIPTOR))
    assert line_index[0] == 0 and len(line_index) == 2  # after Order's map entries
    assert decoder(encode(1, Line(sku="s", qty=2), line_index)) == (None, {"sku": "s", "qty": 2})
    assert decoder(encode(1, Other(name="o"), (1,))) == (None, {"name": "o"})
    assert fake.asked == ["/schemas/ids/1", "/subjects/pbtest-address/versions/1"]  # once per id


def test_a_decoder_survives_pickling_to_a_spark_worker():
    decoder, fake = decoder_for(orders_registry(b64("orders.proto"), b64("pbtest_common_address.proto")))
    assert decoder(encode(1, Order(id=5)))[1]["id"] == 5
    for dumps in (pickle.dumps, cloudpickle.dumps):
        again = pickle.loads(dumps(decoder))
        assert again.registry.config == fake.config
        assert again(encode(1, Order(id=6)))[1]["id"] == 6  # from this process's cache


ORDERS_OK = orders_registry(b64("orders.proto"), b64("pbtest_common_address.proto"))


@pytest.mark.parametrize(
    ("answers", "value", "reason"),
    [
        ({}, encode(3, Order()), "unknown schema id 3 (the schema registry has no such schema)"),
        (
            {"/schemas/ids/3": {"schema": '{"type": "string"}'}},
            encode(3, Order()),
            "schema id 3 is AVRO, not PROTOBUF",
        ),
        (
            {"/schemas/ids/3": {"schema": "{}", "schemaType": "JSON"}},
            encode(3, Order()),
            "schema id 3 is JSON, not PROTOBUF",
        ),
        (
            {
                "/schemas/ids/3": {
                    "schema": base64.b64encode(b"\xff\xff\xff").decode(),
                    "schemaType": "PROTOBUF",
                }
            },
            encode(3, Order()),
            "schema id 3 does not parse (Error parsing message with type "
            "'google.protobuf.FileDescriptorProto')",
        ),
        (
            {
                "/schemas/ids/3": {
                    "schema": 'syntax = "proto3";\nmessage A { int64 x = 1 }',
                    "schemaType": "PROTOBUF",
                }
            },
            encode(3, Order()),
            'schema id 3 does not parse (protoc: eosflow-writer-schema.proto:2:25: Expected ";".)',
        ),
        (
            {"/schemas/ids/3": {"schema": ORDERS, "schemaType": "PROTOBUF"}},  # its reference not given
            encode(3, Order()),
            "schema id 3 does not parse (protoc: pbtest_common_address.proto: File not found.\n"
            'eosflow-writer-schema.proto:7:1: Import "pbtest_common_address.proto" was not found or had '
            "errors.\n"
            'eosflow-writer-schema.proto:37:3: "pbtest.common.Address" is not defined.)',
        ),
        (
            {"/schemas/ids/3": {"schema": b64("orders.proto"), "schemaType": "PROTOBUF"}},
            encode(3, Order()),
            "schema id 3 does not parse (imports pbtest_common_address.proto, neither a reference nor a "
            "well-known type)",
        ),
        (
            {
                "/schemas/ids/3": {
                    **ORDERS_OK["/schemas/ids/1"],
                    "references": [{**ADDRESS_REF[0], "version": 2}],
                }
            },
            encode(3, Order()),
            "schema id 3 does not parse (reference pbtest_common_address.proto (pbtest-address version 2) "
            "not found)",
        ),
        (
            {
                "/schemas/ids/3": {
                    **ORDERS_OK["/schemas/ids/1"],
                    "references": [{**ADDRESS_REF[0], "name": "../x"}],
                },
                "/subjects/pbtest-address/versions/1": {"schema": ADDRESS},
            },
            encode(3, Order()),
            "schema id 3 does not parse (a reference name '../x' that is not an import path (parts of "
            "letters, digits, _ . and -, each starting with a letter, a digit or _, joined by /))",
        ),
        (ORDERS_OK, encode(1, Order(), (2,)), "message indexes [2] outside schema id 1"),
        (ORDERS_OK, encode(1, Order(), (0, 9)), "message indexes [0, 9] outside schema id 1"),
        (ORDERS_OK, encode(1, full_order())[:-1], "does not decode with schema id 1 (DecodeError)"),
        (ORDERS_OK, header(1) + b"\x12\x02\xff\xfe", "does not decode with schema id 1 (DecodeError)"),
        (
            ORDERS_OK,
            encode(1, Order(id=5), (1,)),  # an Order read as an Other: its field 1 is no string
            "unknown fields in a pbtest.Other message, so a wrong message index or schema (schema id 1)",
        ),
        (
            ORDERS_OK,
            encode(1, Order(customer="c"), (0, 3)),  # a Line's field 2 is an int32
            "unknown fields in a pbtest.Order.Line message, so a wrong message index or schema (schema id 1)",
        ),
    ],
)
def test_a_record_that_cannot_be_read_is_rejected_with_its_reason(answers, value, reason):
    assert decoder_for(answers)[0](value) == ("not Protobuf: " + reason, None)


def test_unknown_fields_are_found_in_nested_messages_too():
    decoder, _ = decoder_for(ORDERS_OK)
    line = Line(sku="a").SerializeToString() + b"\xa0\x06\x01"  # field 100, a varint
    value = encode(1, Order()) + b"\xd2\x01" + bytes([len(line)]) + line  # as field 26, first
    assert decoder(value) == (
        "not Protobuf: unknown fields in a pbtest.Order.Line message, so a wrong message index or schema "
        "(schema id 1)",
        None,
    )
    timestamp = b"\x08\x01\xa0\x06\x01"  # seconds 1, field 100
    value = encode(1, Order()) + b"\x6a" + bytes([len(timestamp)]) + timestamp  # as field 13, placed_at
    assert decoder(value)[0].startswith("not Protobuf: unknown fields in a google.protobuf.Timestamp message")


def test_values_with_no_json_like_form_are_rejected():
    order = Order()
    order.placed_at.seconds = 253402300800  # year 10000
    decoder, _ = decoder_for(ORDERS_OK)
    assert decoder(encode(1, order)) == (
        "not Protobuf: field placed_at holds an invalid google.protobuf.Timestamp (schema id 1)",
        None,
    )
    legacy = {"/schemas/ids/4": {"schema": b64("legacy.proto"), "schemaType": "PROTOBUF"}}
    decoder, _ = decoder_for(legacy)
    not_utf8 = encode(4, Old(r=1)) + b"\x0a\x02\xff\xfe"
    assert decoder(not_utf8) == ("not Protobuf: field s holds a string that is not UTF-8 (schema id 4)", None)
    assert decoder(header(4)) == ("not Protobuf: required fields missing: r (schema id 4)", None)


def test_a_message_nested_deeper_than_protobuf_parses_does_not_decode():
    order = Order()
    line = order.first
    for _ in range(150):
        line = line.child
    line.qty = 1
    decoder, _ = decoder_for(ORDERS_OK)
    assert decoder(encode(1, order)) == ("not Protobuf: does not decode with schema id 1 (DecodeError)", None)


def test_a_registry_that_cannot_answer_raises_and_is_asked_again_next_time():
    answers = {"/schemas/ids/1": RegistryUnavailableError("down")}
    decoder, fake = decoder_for(answers)
    with pytest.raises(RegistryUnavailableError):
        decoder(encode(1, Order()))
    fake.answers = ORDERS_OK
    assert decoder(encode(1, Order(id=1)))[1]["id"] == 1  # the failure was not cached as a rejection
    reference_down = {**ORDERS_OK, "/subjects/pbtest-address/versions/1": RegistryUnavailableError("down")}
    with pytest.raises(RegistryUnavailableError):
        decoder_for(reference_down)[0](encode(1, Order()))


def test_a_rejected_schema_is_asked_for_once():
    decoder, fake = decoder_for({})
    for _ in range(3):
        assert decoder(encode(5, Order()))[0].startswith("not Protobuf: unknown schema id 5")
    assert fake.asked == ["/schemas/ids/5"]
