"""A change stream's state in a compacted Kafka topic, the pure part (eosflow.sinks.kafka.state): the key,
the position header, what a change becomes against what its key holds (produced, superseded, a tombstone,
nothing, rejected), and unchanged TOAST columns filled from the restored record or an earlier change."""

from __future__ import annotations

import json

import pytest

from eosflow.errors import PipelineConfigError
from eosflow.pipelines import _parse
from eosflow.schema.changes import PLACEHOLDER, ChangeCheck
from eosflow.sinks.kafka.state import (
    LOWEST,
    NO_POSITION,
    OP_HEADER,
    POSITION_HEADER,
    PartitionState,
    Produce,
    Reject,
    avro_image,
    image_schema,
    is_newer,
    parse_position,
    position_text,
)

COLUMNS = [
    {"name": "tenant", "type": "text", "required": True},
    {"name": "id", "type": "bigint", "required": True},
    {"name": "email", "type": "text"},
    {"name": "notes", "type": "text"},
]


def _spec(**extra) -> dict:
    return {
        "topics": ["shop.public.customers"],
        "changes": "debezium",
        "primary_key": ["id", "tenant"],  # listed otherwise than declared: the key follows the declaration
        "columns": COLUMNS,
        "sink": "kafka",
        "output_topic": "state.customers",
        **extra,
    }


def _pipeline(**extra):
    return _parse("customers", _spec(**extra), "pipeline customers")


@pytest.fixture
def parts():
    pipeline = _pipeline()
    return PartitionState(pipeline.schema), ChangeCheck(pipeline.schema, 65_536, None)


def _change(check, op, row, lsn, headers=None):
    value = {"op": op, "before": row if op == "d" else None, "after": None if op == "d" else row}
    value["source"] = {"lsn": lsn, "ts_ms": 1}
    error, typed = check(b"k", json.dumps(value).encode(), headers)
    assert error is None, error
    return typed


def _row(id_, email, notes="n", tenant="t1"):
    return {"tenant": tenant, "id": id_, "email": email, "notes": notes}


def test_the_key_is_a_json_object_of_the_primary_key_in_declared_order(parts):
    state, check = parts
    action = state.apply(_change(check, "c", _row(7, "a@x"), 100), partition=2, offset=5)
    assert isinstance(action, Produce)
    assert action.key == b'{"tenant":"t1","id":7}'
    assert json.loads(action.value) == _row(7, "a@x")  # the row image alone, not the change's columns
    assert dict(action.headers) == {OP_HEADER: b"c", POSITION_HEADER: b"100/2/5"}


def test_positions_order_by_lsn_alone_when_both_have_one_else_by_coordinates():
    assert parse_position(position_text((100, 2, 5))) == (100, 2, 5)
    assert parse_position(b"-/0/9") == (NO_POSITION, 0, 9)
    assert parse_position(b"junk") is None and parse_position(None) is None
    assert not is_newer((100, 0, 9), (100, 0, 3))  # the same LSN re-delivered at a higher offset
    assert not is_newer((99, 0, 9), (100, 0, 3))
    assert is_newer((101, 0, 1), (100, 0, 3))
    assert is_newer((NO_POSITION, 0, 4), (NO_POSITION, 0, 3))  # a keyed topic: the offset decides
    assert not is_newer((NO_POSITION, 0, 9), (100, 0, 3))  # a missing position counts as lowest
    assert is_newer((1, 0, 0), LOWEST)


def test_an_older_or_equal_change_is_superseded_naming_the_position_it_lost_to(parts):
    state, check = parts
    first = state.apply(_change(check, "c", _row(1, "new@x"), 200), 0, 10)
    state.produced(first)
    for lsn, offset in ((200, 11), (150, 12)):
        lost = state.apply(_change(check, "u", _row(1, "old@x"), lsn), 0, offset)
        assert isinstance(lost, Reject), lost
        assert lost.reason.startswith("superseded") and "200/0/10" in lost.reason
    newer = state.apply(_change(check, "u", _row(1, "newer@x"), 201), 0, 13)
    assert isinstance(newer, Produce)


def test_a_delete_is_a_tombstone_debeziums_tombstone_nothing_and_a_truncate_rejected(parts):
    state, check = parts
    deleted = state.apply(_change(check, "d", {"tenant": "t1", "id": 3}, 300), 0, 1)
    assert isinstance(deleted, Produce) and deleted.value is None and dict(deleted.headers)[OP_HEADER] == b"d"
    _, tombstone = check(b'{"tenant":"t1","id":3}', None)
    assert state.apply(tombstone, 0, 2) is None
    truncate = json.dumps({"op": "t", "source": {"lsn": 400}}).encode()
    _, typed = check(None, truncate)
    rejected = state.apply(typed, 0, 3)
    assert isinstance(rejected, Reject) and "truncate.handling.mode=skip" in rejected.reason


def test_restore_keeps_each_keys_last_record_and_its_last_row(parts):
    state, check = parts
    k = b'{"tenant":"t1","id":1}'
    row = json.dumps(_row(1, "a@x", "kept")).encode()
    read = state.restore(
        [
            (k, row, [(POSITION_HEADER, b"10/0/0")]),
            (k, None, [(POSITION_HEADER, b"20/0/1")]),
            (b'{"tenant":"t1","id":2}', b"{}", None),  # no position: lowest
            (None, b"x", None),
            # A consumed message's headers, read only when the key is asked for.
            (b'{"tenant":"t1","id":3}', b"{}", lambda: [(POSITION_HEADER, b"7/0/4"), ("other", b"x")]),
        ]
    )
    assert read == 5 and state.held(b'{"tenant":"t1","id":3}').position == (7, 0, 4)
    held = state.held(k)
    assert (held.position, held.value, held.image) == ((20, 0, 1), None, row)
    assert state.held(b'{"tenant":"t1","id":2}').position == LOWEST


def test_an_unchanged_toast_column_is_filled_from_the_restored_record_byte_for_byte(parts):
    state, check = parts
    state.restore(
        [(b'{"tenant":"t1","id":1}', b'{"tenant":"t1","id":1,"email":"a","notes":"long \\u00e9"}', [])]
    )
    action = state.apply(_change(check, "u", _row(1, "b@x", PLACEHOLDER), 50), 0, 7)
    assert isinstance(action, Produce)
    assert action.value == b'{"tenant":"t1","id":1,"email":"b@x","notes":"long \\u00e9"}'
    state.produced(action)
    # The next one fills from what this run produced.
    again = state.apply(_change(check, "u", _row(1, "c@x", PLACEHOLDER), 51), 0, 8)
    assert json.loads(again.value)["notes"] == "long \u00e9"


def test_an_unchanged_toast_column_of_a_deleted_or_unknown_key_is_rejected_naming_replica_identity(parts):
    state, check = parts
    nothing = state.apply(_change(check, "u", _row(9, "b@x", PLACEHOLDER), 50), 0, 7)
    assert isinstance(nothing, Reject) and "REPLICA IDENTITY FULL" in nothing.reason
    old_key = json.dumps([{"key": "__debezium.oldkey", "value": json.dumps({"tenant": "t1", "id": 8})}])
    moved = state.apply(_change(check, "c", _row(10, "b@x", PLACEHOLDER), 60, old_key), 0, 8)
    assert isinstance(moved, Reject) and "another partition" in moved.reason


def test_a_key_moved_within_the_partition_takes_its_old_rows_values(parts):
    state, check = parts
    state.produced(state.apply(_change(check, "c", _row(8, "a@x", "toasted"), 10), 0, 0))
    state.produced(state.apply(_change(check, "d", {"tenant": "t1", "id": 8}, 20), 0, 1))
    old_key = json.dumps([{"key": "__debezium.oldkey", "value": json.dumps({"tenant": "t1", "id": 8})}])
    moved = state.apply(_change(check, "c", _row(10, "b@x", PLACEHOLDER), 30, old_key), 0, 3)
    assert isinstance(moved, Produce) and json.loads(moved.value)["notes"] == "toasted"


def test_a_key_moved_after_its_own_create_was_rejected_does_not_take_its_former_rows_values(parts):
    """Key 8 was deleted, then created again by a move from key 5, which this partition never held (the
    create rejected: its notes unknown); then key 8 moves to 10. The row that moved is the rejected one:
    the image key 8 held before its delete is not its value."""
    state, check = parts
    state.produced(state.apply(_change(check, "c", _row(8, "a@x", "toasted"), 10), 0, 0))
    state.produced(state.apply(_change(check, "d", {"tenant": "t1", "id": 8}, 20), 0, 1))
    from_5 = json.dumps([{"key": "__debezium.oldkey", "value": json.dumps({"tenant": "t1", "id": 5})}])
    refused = state.apply(_change(check, "c", _row(8, "b@x", PLACEHOLDER), 30, from_5), 0, 3)
    assert isinstance(refused, Reject)
    state.produced(state.apply(_change(check, "d", {"tenant": "t1", "id": 8}, 40), 0, 4))
    from_8 = json.dumps([{"key": "__debezium.oldkey", "value": json.dumps({"tenant": "t1", "id": 8})}])
    moved = state.apply(_change(check, "c", _row(10, "b@x", PLACEHOLDER), 40, from_8), 0, 6)
    assert isinstance(moved, Reject), json.loads(moved.value)


def test_a_key_deleted_twice_in_the_restored_partition_holds_no_image_for_a_move(parts):
    """As above, from the output partition restored: key 8's record, its tombstone, and a second tombstone
    (a create between was rejected or produced elsewhere). The image before the first delete is not the
    row the second deleted, so the move from key 8 is rejected, not filled with it."""
    state, check = parts
    key = b'{"tenant":"t1","id":8}'
    state.restore(
        [
            (key, json.dumps(_row(8, "a@x", "toasted")).encode(), [(POSITION_HEADER, b"10/0/0")]),
            (key, None, [(POSITION_HEADER, b"20/0/1")]),
            (key, None, [(POSITION_HEADER, b"40/0/4")]),
        ]
    )
    from_8 = json.dumps([{"key": "__debezium.oldkey", "value": json.dumps({"tenant": "t1", "id": 8})}])
    moved = state.apply(_change(check, "c", _row(10, "b@x", PLACEHOLDER), 40, from_8), 0, 6)
    assert isinstance(moved, Reject), json.loads(moved.value)


def test_a_protobuf_output_fills_only_from_what_this_run_produced(parts):
    pipeline = _pipeline()
    state = PartitionState(
        pipeline.schema, encode=lambda typed: repr(list(typed)).encode(), output_format="protobuf"
    )
    _, check = parts
    state.restore([(b'{"tenant":"t1","id":1}', b"protobuf bytes", [(POSITION_HEADER, b"1/0/0")])])
    refused = state.apply(_change(check, "u", _row(1, "b@x", PLACEHOLDER), 50), 0, 7)
    assert isinstance(refused, Reject) and "as protobuf eosflow cannot read back" in refused.reason
    state.produced(state.apply(_change(check, "c", _row(2, "a@x", "kept"), 60), 0, 8))
    filled = state.apply(_change(check, "u", _row(2, "b@x", PLACEHOLDER), 61), 0, 9)
    assert isinstance(filled, Produce) and b"'kept'" in filled.value


def test_an_avro_output_fills_from_the_restored_record_of_its_own_schema(parts):
    import functools

    from eosflow.schema.avro_out import AvroOutput, output_schema

    pipeline = _pipeline()
    image = image_schema(pipeline.schema)
    body = output_schema("customers", image)
    output = AvroOutput(7, body, tuple(c.name for c in image.columns), frozenset())
    state = PartitionState(pipeline.schema, output, "avro", functools.partial(avro_image, output))
    _, check = parts
    held = output(["t1", 1, "a@x", "kept"])
    older = AvroOutput(6, body, output.names, frozenset())(["t1", 2, "a@x", "kept"])
    state.restore([(b'{"tenant":"t1","id":1}', held, []), (b'{"tenant":"t1","id":2}', older, [])])
    filled = state.apply(_change(check, "u", _row(1, "b@x", PLACEHOLDER), 50), 0, 7)
    assert isinstance(filled, Produce) and avro_image(output, filled.value) == ["t1", 1, "b@x", "kept"]
    refused = state.apply(_change(check, "u", _row(2, "b@x", PLACEHOLDER), 51), 0, 8)
    assert isinstance(refused, Reject) and "Avro of an earlier schema" in refused.reason


def test_output_key_and_several_topics_are_refused_with_changes():
    with pytest.raises(PipelineConfigError, match="remove output_key"):
        _pipeline(output_key="email")
    with pytest.raises(PipelineConfigError, match="a pipeline per topic"):
        _pipeline(topics=["a.customers", "b.customers"])
    with pytest.raises(PipelineConfigError, match="deletes"):
        _pipeline(deletes="soft")  # a tombstone is the delete; a marked row is a warehouse's
    assert _pipeline().sink.keeps_state
