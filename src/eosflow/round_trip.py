"""The round trip checked: Kafka -> warehouse -> Kafka -> warehouse, every row once, as it left.

A publisher sends a warehouse table to a topic; a second pipeline ingests that topic into a second
table. The check compares the three places a row passes through:

- the published table: what should arrive, once each;
- the topic, read_committed (what any consumer gets): each row id once (the eosflow-row-id header);
- the second table: each published row once, column by column equal (a changed value counts as one
  missing and one unexpected), and nothing else.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import psycopg
from psycopg import sql

from eosflow.pipelines import Pipeline
from eosflow.publish.declaration import Publisher
from eosflow.publish.run import ROW_ID_HEADER
from eosflow.rows import one_row
from eosflow.settings import Settings
from eosflow.sources.kafka.read_back import partitions_of, read_to_end


@dataclass(frozen=True)
class RoundTripResult:
    published_table: str
    topic: str
    target_table: str
    rows: int  # in the published table
    records: int  # in the topic, read_committed
    records_repeated: int  # records beyond the first of a row id in the topic
    arrived: int  # rows in the second table
    arrived_repeated: int  # rows beyond the first of an id in the second table
    missing: int  # published rows not in the second table, equal in every compared column
    unexpected: int  # rows of the second table no published row equals

    @property
    def ok(self) -> bool:
        return (
            self.records == self.rows == self.arrived
            and self.records_repeated == self.arrived_repeated == self.missing == self.unexpected == 0
        )

    def table(self) -> str:
        return "\n".join(
            [
                f"rows in {self.published_table:<32} {self.rows:>9,}",
                f"records in {self.topic:<28} {self.records:>9,}   repeated: {self.records_repeated:,}",
                f"rows in {self.target_table:<32} {self.arrived:>9,}   repeated: {self.arrived_repeated:,}",
                f"published rows missing or changed there  {self.missing:>9,}",
                f"rows there that were never published     {self.unexpected:>9,}",
            ]
        )


def check(settings: Settings, publisher: Publisher, pipeline: Pipeline) -> RoundTripResult:
    """Compare the publisher's table, its topic and the pipeline's table on the pipeline's columns."""
    if pipeline.sink.table is None:
        raise ValueError(
            f"pipeline {pipeline.name!r} writes {pipeline.sink.output}, no table: the round trip ends in "
            "a table"
        )
    columns = [c.name for c in pipeline.schema.columns]
    if publisher.id_column not in columns:
        raise ValueError(
            f"the publisher's id column {publisher.id_column!r} is not a column of pipeline "
            f"{pipeline.name!r} ({', '.join(columns)}): the check matches rows by it"
        )
    in_topic = Counter(
        dict(m.headers() or []).get(ROW_ID_HEADER)
        for m in read_to_end(
            settings.kafka, [(publisher.topic, p, -2) for p in partitions_of(settings.kafka, publisher.topic)]
        )
    )
    sent, got = (sql.Identifier(*t.split(".")) for t in (publisher.table, pipeline.target_table))
    cols = sql.SQL(", ").join(map(sql.Identifier, columns))
    key = sql.Identifier(publisher.id_column)
    query = sql.SQL(
        "with sent as (select {cols} from {sent}), got as (select {cols} from {got}) "
        "select (select count(*) from sent), (select count(*) from got), "
        "(select count(*) - count(distinct {key}) from got), "
        "(select count(*) from (select * from sent except all select * from got) m), "
        "(select count(*) from (select * from got except all select * from sent) u)"
    ).format(cols=cols, sent=sent, got=got, key=key)
    with psycopg.connect(settings.warehouse_dsn) as conn:
        rows, arrived, arrived_repeated, missing, unexpected = one_row(conn.execute(query))
    return RoundTripResult(
        publisher.table,
        publisher.topic,
        pipeline.target_table,
        rows,
        sum(in_topic.values()),
        sum(in_topic.values()) - len(in_topic),
        arrived,
        arrived_repeated,
        missing,
        unexpected,
    )
