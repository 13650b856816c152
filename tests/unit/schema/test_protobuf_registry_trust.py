"""A registry schema is data: its reference names never become files or protoc options (issue 42).

A reference's `name` is what the schema's `import` lines call the file; before issue 42 it was also the
file's name on disk and an argument of protoc, so a reference named like an option (`--plugin=...`,
`--x_out=...`) made protoc start a program of the schema's choosing.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from eosflow.schema import protobuf_schema
from eosflow.schema.protobuf import encode
from tests.unit.schema.test_protobuf_decode import ADDRESS, ORDERS, Order, decoder_for

LEAF = 'syntax = "proto3";\npackage evil;\nmessage E { int64 x = 1; }\n'


@pytest.fixture
def planted(tmp_path: Path) -> dict[str, Path]:
    """A program a schema would like protoc to start, the marker it leaves, and where its output would go."""
    marker = tmp_path / "marker"
    program = tmp_path / "protoc-gen-evil"
    program.write_text(f"#!/bin/sh\ntouch {marker}\ncat >/dev/null\n")
    program.chmod(program.stat().st_mode | stat.S_IEXEC)
    return {"marker": marker, "program": program, "out": tmp_path / "out"}


def option_shaped(planted: dict[str, Path]) -> list[str]:
    return [f"--plugin=protoc-gen-evil={planted['program']}", f"--evil_out={planted['out']}"]


@pytest.fixture
def own_tempdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The run's temporary folder, so the test can see that nothing is left or written beside it."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def test_option_shaped_reference_names_start_no_program_and_make_a_rejected_row(planted, own_tempdir):
    names = option_shaped(planted)
    answers = {
        "/schemas/ids/1": {
            "schema": ORDERS,
            "schemaType": "PROTOBUF",
            "references": [
                {"name": "pbtest_common_address.proto", "subject": "pbtest-address", "version": 1},
                *({"name": n, "subject": f"evil-{i}", "version": 1} for i, n in enumerate(names)),
            ],
        },
        "/subjects/pbtest-address/versions/1": {"schema": ADDRESS, "schemaType": "PROTOBUF"},
        "/subjects/evil-0/versions/1": {"schema": LEAF, "schemaType": "PROTOBUF"},
        "/subjects/evil-1/versions/1": {"schema": LEAF, "schemaType": "PROTOBUF"},
    }
    decoder, _ = decoder_for(answers)
    reason, value = decoder(encode(1, Order(id=5)))
    assert value is None
    assert reason.startswith("not Protobuf: schema id 1 does not parse (")
    assert "not an import path" in reason
    assert not planted["marker"].exists()
    assert not planted["out"].exists()
    assert list(own_tempdir.iterdir()) == []  # the run's folder is gone, nothing beside it


def test_even_unchecked_names_never_reach_protoc_as_files_or_options(planted, own_tempdir):
    """The compile step alone, past the name check: the defence must not depend on spotting bad names."""
    evil_plugin, evil_out = option_shaped(planted)
    root = 'syntax = "proto3";\nimport "' + evil_plugin + '";\nmessage R { evil.E e = 1; }\n'
    texts = {evil_plugin: LEAF, evil_out: LEAF.replace("evil", "other"), protobuf_schema.ROOT: root}
    compiled = protobuf_schema._compile(texts, {}, order=[evil_plugin, evil_out, protobuf_schema.ROOT])
    assert set(compiled) == set(texts)  # each file under the name the registry gave it, as data
    assert list(compiled[protobuf_schema.ROOT].dependency) == [evil_plugin]
    assert not planted["marker"].exists()
    assert not planted["out"].exists()
    assert list(own_tempdir.iterdir()) == []


def test_a_reference_that_imports_another_reference_compiles_after_it(own_tempdir):
    middle = 'syntax = "proto3";\npackage m;\nimport "deep/leaf.proto";\nmessage M { evil.E e = 1; }\n'
    root = 'syntax = "proto3";\nimport "mid.proto";\nmessage R { m.M m = 1; }\n'
    answers = {
        "/schemas/ids/7": {
            "schema": root,
            "schemaType": "PROTOBUF",
            "references": [{"name": "mid.proto", "subject": "mid", "version": 1}],
        },
        "/subjects/mid/versions/1": {
            "schema": middle,
            "references": [{"name": "deep/leaf.proto", "subject": "leaf", "version": 1}],
        },
        "/subjects/leaf/versions/1": {"schema": LEAF},
    }
    pool, root_proto = protobuf_schema.load(decoder_for(answers)[1], 7)
    assert root_proto.name == protobuf_schema.ROOT
    assert pool.FindMessageTypeByName("m.M").fields_by_name["e"].message_type.full_name == "evil.E"
    assert os.listdir(own_tempdir) == []


@pytest.mark.parametrize(
    "name",
    ["-x.proto", "a/--b.proto", "a b.proto", "a\n.proto", "", "/abs.proto", "../up.proto", "a\\b.proto"],
)
def test_a_reference_name_that_is_not_an_import_path_is_refused(name):
    with pytest.raises(ValueError, match="not an import path"):
        protobuf_schema.import_path(name)


@pytest.mark.parametrize("name", ["other.proto", "com/acme/v1/address.proto", "google/type/money.proto"])
def test_import_paths_as_serializers_register_them_are_accepted(name):
    assert protobuf_schema.import_path(name) == name
