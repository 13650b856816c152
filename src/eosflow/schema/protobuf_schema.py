"""A Protobuf writer schema from the registry -> a descriptor pool holding its file (eosflow.schema.protobuf).

The registry holds a schema (and each file it references) either as base64 of a serialized
FileDescriptorProto (what confluent-kafka-python registers) or as .proto text (the Java serializer's, a
REST user's), which protoc (grpcio-tools) compiles, in a process of its own so its errors come back as
text. Google's well-known types (google/protobuf/*.proto), which serializers do not register, come from
the protobuf package itself. Whatever under an id cannot be read is the Rejection of its records; a
registry that cannot answer raises RegistryUnavailableError, as for Avro.

A registry schema is data (docs/DESIGN.md, "Trust boundaries"): a reference's name is what `import` lines
and descriptors call a file, never a file name on disk or a protoc argument. Each text is compiled on its
own under a name eosflow chooses, after the files it imports, which protoc gets as descriptors.
"""

from __future__ import annotations

import base64
import binascii
import importlib
import os
import re
import subprocess
import sys
import tempfile
import urllib.parse

from google.protobuf import descriptor_pb2, descriptor_pool

from eosflow.schema.avro import RegistryUnavailableError, Rejection, SchemaRegistry

for _name in ("any", "duration", "empty", "field_mask", "struct", "timestamp", "wrappers"):
    importlib.import_module(f"google.protobuf.{_name}_pb2")  # the well-known types, in the default pool

ROOT = "eosflow-writer-schema.proto"  # the name the writer schema's own file gets (the registry gives none)
# An import path as serializers register one: parts of letters, digits, _ . - that start with a letter, a
# digit or _ (so no option-shaped `-x`, no `..`, no hidden `.x`), joined by /.
_IMPORT_PATH = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*(?:/[A-Za-z0-9_][A-Za-z0-9_.-]*)*")
# The one file protoc reads from disk, whichever schema is being compiled: a hidden name, which no import
# path can be, so no reference can shadow it.
_SOURCE = ".eosflow-source.proto"


def import_path(name: object) -> str:
    """`name` if it is an import path a serializer would register, else a ValueError saying what it is."""
    if not isinstance(name, str) or len(name) > 1024 or not _IMPORT_PATH.fullmatch(name):
        raise ValueError(
            f"a reference name {str(name)[:200]!r} that is not an import path (parts of letters, digits, "
            "_ . and -, each starting with a letter, a digit or _, joined by /)"
        )
    return name


def load(registry: SchemaRegistry, schema_id: int) -> tuple | Rejection:
    """(the pool, the writer schema's FileDescriptorProto) of `schema_id`, or the Rejection of its records."""
    answer = registry.get_json(f"/schemas/ids/{schema_id}")
    if answer is None:
        return Rejection(
            f"not Protobuf: unknown schema id {schema_id} (the schema registry has no such schema)"
        )
    kind = answer.get("schemaType", "AVRO")  # absent means Avro in the Confluent API
    if kind != "PROTOBUF":
        return Rejection(f"not Protobuf: schema id {schema_id} is {kind}, not PROTOBUF")
    try:
        files: dict[str, str] = {}
        order: list[str] = []
        _collect(registry, answer.get("references"), files, order, depth=0)
        return _build(answer["schema"], files, order)
    except RegistryUnavailableError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever the registry holds under the id is not readable
        return Rejection(f"not Protobuf: schema id {schema_id} does not parse ({str(exc)[:500]})")


def _collect(
    registry: SchemaRegistry, refs: list | None, files: dict[str, str], order: list[str], depth: int
) -> None:
    """The referenced files' schemas by their import names, recursively (what references reference), and
    in `order` each name after the names it references, so a file compiles after its imports."""
    if depth > 32:
        raise ValueError("schema references nested deeper than 32")
    for ref in refs or []:
        name = import_path(ref["name"])
        if name in files:
            continue
        subject = urllib.parse.quote(ref["subject"], safe="")
        answer = registry.get_json(f"/subjects/{subject}/versions/{int(ref['version'])}")
        if answer is None:
            raise ValueError(f"reference {name} ({ref['subject']} version {ref['version']}) not found")
        files[name] = answer["schema"]
        _collect(registry, answer.get("references"), files, order, depth + 1)
        order.append(name)


def _build(root: str, refs: dict[str, str], order: list[str]) -> tuple:
    """A fresh pool with the writer schema's file, its references and the well-known types it imports."""
    protos: dict[str, descriptor_pb2.FileDescriptorProto] = {}
    texts: dict[str, str] = {}
    for name, schema in [(ROOT, root), *refs.items()]:
        try:
            raw = base64.b64decode(schema, validate=True)  # .proto text always has a space, ; or {
        except binascii.Error:
            texts[name] = schema
            continue
        protos[name] = descriptor_pb2.FileDescriptorProto.FromString(raw)
        protos[name].name = name  # what importers call it, as confluent-kafka's deserializer does
    if texts:
        protos.update(_compile(texts, protos, [*order, ROOT]))
    pool = descriptor_pool.DescriptorPool()
    _add(pool, ROOT, protos, set())
    return pool, protos[ROOT]


def _add(pool, name: str, protos: dict, added: set[str]) -> None:
    if name in added:
        return
    added.add(name)  # before its imports: a cycle then fails in pool.Add instead of recursing on
    if name.startswith("google/protobuf/") or name not in protos:
        try:  # a well-known type, from the protobuf package (never from the registry)
            proto = descriptor_pb2.FileDescriptorProto()
            descriptor_pool.Default().FindFileByName(name).CopyToProto(proto)
        except KeyError:
            raise ValueError(f"imports {name}, neither a reference nor a well-known type") from None
    else:
        proto = protos[name]
    for dependency in proto.dependency:
        _add(pool, dependency, protos, added)
    pool.Add(proto)


def _compile(
    texts: dict[str, str], protos: dict[str, descriptor_pb2.FileDescriptorProto], order: list[str]
) -> dict[str, descriptor_pb2.FileDescriptorProto]:
    """.proto texts compiled by protoc one at a time, in `order` (imports first), each read from the one
    file eosflow names; what it imports comes as descriptors (given or compiled before it). The names in
    `texts` are only ever data: the descriptors' names, never a path or an argument."""
    import grpc_tools

    wkt = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    known = dict(protos)
    compiled: dict[str, descriptor_pb2.FileDescriptorProto] = {}
    with tempfile.TemporaryDirectory(prefix="eosflow-proto-") as folder:
        sources = os.path.join(folder, "src")  # protoc's only folder of ours: nothing else is in it
        os.mkdir(sources)
        source, given, target = (
            os.path.join(sources, _SOURCE),
            *(os.path.join(folder, f) for f in ("given", "out")),
        )
        for name in dict.fromkeys(n for n in order if n in texts):
            with open(source, "w", encoding="utf-8") as out:
                out.write(texts[name])
            with open(given, "wb") as out:
                out.write(descriptor_pb2.FileDescriptorSet(file=list(known.values())).SerializeToString())
            args = [f"--proto_path={sources}", f"--proto_path={wkt}", f"--descriptor_set_in={given}"]
            code, errors = _run_protoc([*args, f"--descriptor_set_out={target}", source])
            if code != 0 or not os.path.exists(target):
                errors = errors.replace(source, name).replace(_SOURCE, name).replace(folder + os.sep, "")
                raise ValueError(f"protoc: {errors.strip() or f'exit {code}'}")
            with open(target, "rb") as done:
                (proto,) = descriptor_pb2.FileDescriptorSet.FromString(done.read()).file
            os.remove(target)
            proto.name = name  # what importers call it
            known[name] = compiled[name] = proto
    return compiled


def _run_protoc(args: list[str]) -> tuple[int, str]:
    """protoc with `args`, in a process of its own (its C++ writes errors to fd 2): exit code, errors."""
    done = subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", *args], capture_output=True, text=True, check=False
    )
    return done.returncode, done.stderr
