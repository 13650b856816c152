"""A Protobuf writer schema from the registry -> a descriptor pool holding its file (eosflow.schema.protobuf).

The registry holds a schema (and each file it references) either as base64 of a serialized
FileDescriptorProto (what confluent-kafka-python registers) or as .proto text (the Java serializer's, a
REST user's), which protoc (grpcio-tools) compiles, in a process of its own so its errors come back as
text. Google's well-known types (google/protobuf/*.proto), which serializers do not register, come from
the protobuf package itself. Whatever under an id cannot be read is the Rejection of its records; a
registry that cannot answer raises RegistryUnavailableError, as for Avro.
"""

from __future__ import annotations

import base64
import binascii
import importlib
import os
import subprocess
import sys
import tempfile
import urllib.parse
from pathlib import PurePosixPath

from google.protobuf import descriptor_pb2, descriptor_pool

from eosflow.schema.avro import RegistryUnavailableError, Rejection, SchemaRegistry

for _name in ("any", "duration", "empty", "field_mask", "struct", "timestamp", "wrappers"):
    importlib.import_module(f"google.protobuf.{_name}_pb2")  # the well-known types, in the default pool

ROOT = "eosflow-writer-schema.proto"  # the name the writer schema's own file gets (the registry gives none)


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
        _collect(registry, answer.get("references"), files, depth=0)
        return _build(answer["schema"], files)
    except RegistryUnavailableError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever the registry holds under the id is not readable
        return Rejection(f"not Protobuf: schema id {schema_id} does not parse ({str(exc)[:500]})")


def _collect(registry: SchemaRegistry, refs: list | None, files: dict[str, str], depth: int) -> None:
    """The referenced files' schemas by their import names, recursively (what references reference)."""
    if depth > 32:
        raise ValueError("schema references nested deeper than 32")
    for ref in refs or []:
        if ref["name"] in files:
            continue
        subject = urllib.parse.quote(ref["subject"], safe="")
        answer = registry.get_json(f"/subjects/{subject}/versions/{int(ref['version'])}")
        if answer is None:
            raise ValueError(f"reference {ref['name']} ({ref['subject']} version {ref['version']}) not found")
        files[ref["name"]] = answer["schema"]
        _collect(registry, answer.get("references"), files, depth + 1)


def _build(root: str, refs: dict[str, str]) -> tuple:
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
        protos.update(_compile(texts, protos))
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


def _compile(texts: dict[str, str], protos: dict) -> dict[str, descriptor_pb2.FileDescriptorProto]:
    """.proto texts compiled by protoc, in process; references given as descriptors are passed as such."""
    import grpc_tools

    with tempfile.TemporaryDirectory(prefix="eosflow-proto-") as folder:
        for name, text in texts.items():
            path = PurePosixPath(name)
            if not name or path.is_absolute() or ".." in path.parts or "\\" in name:
                raise ValueError(f"a file name {name!r} that is not a relative path")
            os.makedirs(os.path.join(folder, *path.parts[:-1]), exist_ok=True)
            with open(os.path.join(folder, *path.parts), "w", encoding="utf-8") as out:
                out.write(text)
        args = [f"-I{folder}", f"-I{os.path.join(os.path.dirname(grpc_tools.__file__), '_proto')}"]
        if protos:
            given = descriptor_pb2.FileDescriptorSet(file=list(protos.values()))
            with open(os.path.join(folder, ".given.pb"), "wb") as out:
                out.write(given.SerializeToString())
            args.append(f"--descriptor_set_in={os.path.join(folder, '.given.pb')}")
        target = os.path.join(folder, ".compiled.pb")
        args += ["--include_imports", f"--descriptor_set_out={target}", *texts]
        code, errors = _run_protoc(args)
        if code != 0 or not os.path.exists(target):
            raise ValueError(f"protoc: {errors.replace(folder + os.sep, '').strip() or f'exit {code}'}")
        with open(target, "rb") as compiled:
            files = descriptor_pb2.FileDescriptorSet.FromString(compiled.read()).file
    return {f.name: f for f in files if f.name in texts}


def _run_protoc(args: list[str]) -> tuple[int, str]:
    """protoc with `args`, in a process of its own (its C++ writes errors to fd 2): exit code, errors."""
    done = subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", *args], capture_output=True, text=True, check=False
    )
    return done.returncode, done.stderr
