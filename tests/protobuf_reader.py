"""How a consumer that knows only the registry reads eosflow's Protobuf output: the registered descriptor
and protobuf's own runtime, nothing of eosflow's (the Kafka sink's and the publisher's tests)."""

from __future__ import annotations

import base64

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2


def message_class(schema: str | descriptor_pb2.FileDescriptorProto) -> type:
    """The class of the first message of a registered schema (base64 of a FileDescriptorProto, as the
    registry returns it) or of the descriptor itself; Google's Timestamp comes from protobuf."""
    if isinstance(schema, str):
        schema = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(schema))
    pool = descriptor_pool.DescriptorPool()
    timestamp = descriptor_pb2.FileDescriptorProto()
    timestamp_pb2.DESCRIPTOR.CopyToProto(timestamp)
    pool.Add(timestamp)
    pool.Add(schema)
    return message_factory.GetMessageClass(
        pool.FindMessageTypeByName(f"{schema.package}.{schema.message_type[0].name}")
    )
