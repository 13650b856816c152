"""Read a topic back as a downstream consumer would, and the source records its headers name."""

from __future__ import annotations

from collections import Counter

from eosflow.sources.kafka.read_back import partitions_of, read_to_end


def read_all(settings, topic: str, isolation: str = "read_committed") -> list:
    starts = [(topic, p, -2) for p in partitions_of(settings.kafka, topic)]
    return list(read_to_end(settings.kafka, starts, isolation=isolation, idle_s=10))


def sources(records) -> Counter:
    return Counter(
        (
            h["eosflow-source-topic"].decode(),
            int(h["eosflow-source-partition"]),
            int(h["eosflow-source-offset"]),
        )
        for h in (dict(m.headers()) for m in records)
    )
