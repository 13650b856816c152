"""`eosflow verify` for a change stream's state in Iceberg: the table, read by a PyIceberg scan, against the
changes the ledger says were committed, re-read from the source topic (docs/DESIGN.md, "State in Iceberg").

- `state_keys_unique`: no primary key has two rows.
- `state_coordinates_committed`: every row's Kafka coordinates lie in a committed range of the ledger.
- `state_holds_last_changes` (S1): each key whose last committed change is a c, r or u has a row holding
  that change (its position and coordinates, and the value of every column the change carried; a column
  Debezium left out, TOAST, is not compared).
- `state_holds_no_deleted_key` (S2): a key whose last committed change is a delete, or older than the latest
  truncate, has no row (soft deletes: its row carries deleted_at).
- `state_holds_every_live_key` (S3) is part of S1 here: a live key without a row fails it, named.
- `state_counts_add_up`: the ledger's committed ranges read as many records as they wrote and rejected,
  and eosflow.rejected holds a row for each rejected one (a change the commit rejected is counted there
  like any other); the summary line under the checks gives the counts.

The last changes come from the topic itself, read_committed, re-checked as the run checks them (the
declaration's change check), never from what eosflow wrote; a change the ledger holds as a rejected row
(one the commit could not apply: an unchanged TOAST value nothing held) is no key's last change. Kafka
keeps records only so long: when a committed range starts below its partition's log start, the S checks
cannot be made and the verdict says so (status `not checked`, naming the partitions); the first two still
run. Failures name keys.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path

import psycopg

from eosflow.dbt_build import CheckResult, VerifyResult
from eosflow.rows import one_row
from eosflow.schema.changes import TOMBSTONE, ChangeCheck, declared
from eosflow.settings import Settings
from eosflow.sinks.protocol import Pipeline

SHOWN = 5
UNIQUE, COMMITTED, LAST, NO_DELETED, COUNTS = (
    "state_keys_unique",
    "state_coordinates_committed",
    "state_holds_last_changes",
    "state_holds_no_deleted_key",
    "state_counts_add_up",
)


@dataclass(frozen=True)
class StateVerifyResult(VerifyResult):
    """VerifyResult's shape (kept in eosflow.checks as any verdict); read from the table and Kafka."""

    def table(self) -> str:
        lines = [f"Iceberg state verify of pipeline {self.pipeline}: {'ok' if self.ok else 'FAILED'}"]
        lines += [f"  {c.describe()}" for c in self.checks]
        return "\n".join(lines + ([f"  {self.output}"] if self.output else []))


def verify_state_table(
    settings: Settings, pipeline: Pipeline, table_name: str, soft: bool
) -> StateVerifyResult:
    from eosflow.sinks.iceberg.catalog import load
    from eosflow.sinks.kafka.verify import _log_starts

    schema = pipeline.schema
    key = schema.primary_key
    table = load(settings, table_name)
    rows = table.scan().to_arrow().to_pylist() if table.current_snapshot() is not None else []
    with psycopg.connect(settings.warehouse_dsn) as conn:
        ranges = conn.execute(
            "select topic, partition, start_offset, end_offset from eosflow.ledger "
            "where pipeline = %s and kind = 'data' and end_offset > start_offset order by 1, 2, 3",
            (pipeline.name,),
        ).fetchall()
        rejected = set(
            conn.execute(
                "select kafka_topic, kafka_partition, kafka_offset from eosflow.rejected where pipeline = %s",
                (pipeline.name,),
            ).fetchall()
        )
        counts = one_row(
            conn.execute(
                "select coalesce(sum(records_read), 0), coalesce(sum(rows_written), 0), "
                "coalesce(sum(rows_rejected), 0) from eosflow.ledger where pipeline = %s and kind = 'data'",
                (pipeline.name,),
            )
        )
    held: dict[tuple, list[dict]] = {}
    for row in rows:
        held.setdefault(tuple(row[k] for k in key), []).append(row)
    twice = sorted((k for k, found in held.items() if len(found) > 1), key=repr)
    spans: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for t, p, s, e in ranges:
        spans.setdefault((t, p), []).append((s, e))
    outside = [r for r in rows if not _inside(r, spans)]
    checks = [
        _result(UNIQUE, None, [{**dict(zip(key, k, strict=True)), "rows": len(held[k])} for k in twice]),
        _result(
            COMMITTED,
            None,
            [
                {
                    **{k: r[k] for k in key},
                    "kafka": f"{r['kafka_topic']}[{r['kafka_partition']}]@{r['kafka_offset']}",
                }
                for r in outside
            ],
        ),
    ]
    log_start = _log_starts(settings.kafka, {t for t, *_ in ranges})
    gone = sorted({f"{t}[{p}]" for t, p, s, _ in ranges if s < log_start.get((t, p), 0)})
    if gone:
        why = (
            f"Kafka no longer holds the start of the committed ranges of {', '.join(gone)} (retention), so "
            "each key's last committed change cannot be re-read: not checked"
        )
        checks += [
            CheckResult(n, i, "not checked", 0, message=why) for n, i in ((LAST, "S1"), (NO_DELETED, "S2"))
        ]
    else:
        last = _last_changes(settings, pipeline, ranges, rejected)
        wrong, deleted = _compare(last, held, schema, soft)
        checks += [_result(LAST, "S1", wrong), _result(NO_DELETED, "S2", deleted)]
    read, written, refused = counts
    checks.append(_result(COUNTS, None, _counts(read, written, refused, len(rejected))))
    summary = (
        f"ledger: {read:,} records read in {len(ranges)} committed range(s): {written:,} written, "
        f"{refused:,} rejected; eosflow.rejected holds {len(rejected):,}"
    )
    failed = any(not c.ok for c in checks)
    return StateVerifyResult(pipeline.name, 1 if failed else 0, tuple(checks), summary, Path("."))


def _counts(read: int, written: int, refused: int, rejected_rows: int) -> list[dict]:
    """What does not add up: the ledger's read against written and rejected, its rejected against the
    rejected rows."""
    wrong = []
    if written + refused != read:
        wrong.append({"ledger": f"{read:,} read, {written:,} written + {refused:,} rejected"})
    if refused != rejected_rows:
        wrong.append({"rejected": f"the ledger counts {refused:,}, eosflow.rejected holds {rejected_rows:,}"})
    return wrong


def _result(name: str, invariant: str | None, offending: list[dict]) -> CheckResult:
    if not offending:
        return CheckResult(name, invariant, "pass", 0)
    return CheckResult(name, invariant, "fail", len(offending), tuple(offending[:SHOWN]))


def _inside(row: dict, spans: dict[tuple[str, int], list[tuple[int, int]]]) -> bool:
    o = row["kafka_offset"]
    return any(s <= o < e for s, e in spans.get((row["kafka_topic"], row["kafka_partition"]), ()))


def _last_changes(
    settings: Settings, pipeline: Pipeline, ranges, rejected: AbstractSet[tuple[str, int, int]] = frozenset()
) -> tuple[dict, tuple | None]:
    """Each key's last committed change (place, op, image, unchanged columns, coordinates) and the latest
    truncate's place, from the topic's records in the committed ranges, re-checked as changes; the
    `rejected` coordinates (rejected rows) are none."""
    from eosflow.sources.kafka.range_read import headers_json
    from eosflow.sources.kafka.read_back import read_to_end

    schema = pipeline.schema
    columns = [c.name for c in declared(schema)]
    width = len(columns)
    index = [columns.index(k) for k in schema.primary_key]
    check = ChangeCheck(schema, pipeline.max_value_bytes, settings.registry)
    spans: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for t, p, s, e in ranges:
        spans.setdefault((t, p), []).append((s, e))
    starts = [(t, p, min(s for s, _ in v)) for (t, p), v in spans.items()]
    ends = {k: max(e for _, e in v) for k, v in spans.items()}
    last: dict[tuple, dict] = {}
    truncate = None
    for m in read_to_end(settings.kafka, starts, ends) if starts else ():
        in_range = spans[(m.topic(), m.partition())]
        if (
            not any(s <= m.offset() < e for s, e in in_range)
            or (m.topic(), m.partition(), m.offset()) in rejected
        ):
            continue
        headers = m.headers()
        error, typed = check(m.key(), m.value(), headers_json(headers) if headers else None)
        if error is not None:
            continue
        assert typed is not None  # a change that passed has its typed columns
        image, (op, lsn, _ts, unchanged, _old) = typed[:width], typed[width : width + 5]
        place = (-1 if lsn is None else lsn, m.partition(), m.offset())
        if op == TOMBSTONE:
            continue
        if op == "t":
            truncate = place if truncate is None or place > truncate else truncate
            continue
        k = tuple(image[i] for i in index)
        if k not in last or place > last[k]["place"]:
            last[k] = {
                "place": place,
                "op": op,
                "image": dict(zip(columns, image, strict=True)),
                "unchanged": set(unchanged or ()),
                "at": f"{m.topic()}[{m.partition()}]@{m.offset()}",
            }
    return last, truncate


def _differs(row: dict, change: dict, columns: dict, soft: bool) -> dict | None:
    """How a row differs from its key's last change (None: it holds it)."""
    lsn = row["change_lsn"]
    place = (-1 if lsn is None else lsn, row["kafka_partition"], row["kafka_offset"])
    differing = [
        c
        for c, v in change["image"].items()
        if c not in change["unchanged"] and row.get(c) != _as_stored(columns[c], v)
    ]
    if place == change["place"] and not differing and not (soft and row.get("deleted_at") is not None):
        return None
    at = f"{row['kafka_topic']}[{row['kafka_partition']}]@{row['kafka_offset']}"
    return {"row_from": at, "differing": differing}


def _as_stored(column, value):
    """A checked value as the table stores it (arrays as their literal, jsonb as its text)."""
    from eosflow.schema.arrow import to_arrow

    return to_arrow(column, [value]).to_pylist()[0]


def _compare(found: tuple[dict, tuple | None], held: dict, schema, soft: bool) -> tuple[list, list]:
    """(S1 failures: live keys whose row is missing or differs; S2 failures: deleted keys present)."""
    last, truncate = found
    key = schema.primary_key
    columns = {c.name: c for c in declared(schema)}
    wrong, deleted = [], []
    for k, change in sorted(last.items(), key=lambda kv: repr(kv[0])):
        named = dict(zip(key, k, strict=True))
        rows = held.get(k, [])
        row = rows[0] if rows else None
        dead = change["op"] == "d" or (truncate is not None and change["place"] < truncate)
        if dead:
            if row is not None and not (soft and row.get("deleted_at") is not None):
                deleted.append({**named, "last_change": f"{change['op']} at {change['at']}"})
            continue
        if row is None:
            wrong.append({**named, "missing": f"its last change ({change['op']} at {change['at']}) is live"})
            continue
        for row in rows:  # a key twice: each of its rows must be the last change
            problem = _differs(row, change, columns, soft)
            if problem is not None:
                wrong.append({**named, "last_change": change["at"], **problem})
                break
    for k, rows in sorted(held.items(), key=lambda kv: repr(kv[0])):
        if k not in last and not (soft and rows[0].get("deleted_at") is not None):
            wrong.append({**dict(zip(key, k, strict=True)), "unexpected": "no committed change of this key"})
    return wrong, deleted
