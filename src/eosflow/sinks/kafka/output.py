"""What the Kafka sink's modules need of its declaration (sink.KafkaSink), typed without importing it:
they run in Spark's tasks, where the declaration's parser is not wanted."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from eosflow.sinks.protocol import Pipeline


@runtime_checkable
class Output(Protocol):
    """A `sink: kafka` pipeline's sink keys (read-only: KafkaSink is a frozen dataclass)."""

    @property
    def output_topic(self) -> str: ...

    @property
    def dead_letter_topic(self) -> str: ...

    @property
    def key_column(self) -> str | None: ...

    @property
    def transaction_timeout_ms(self) -> int: ...

    @property
    def output_format(self) -> str: ...


def output_of(pipeline: Pipeline) -> Output:
    """The pipeline's sink as the Kafka sink's declaration."""
    sink = pipeline.sink
    assert isinstance(sink, Output), f"pipeline {pipeline.name}: sink {sink.kind}, not kafka"
    return sink
