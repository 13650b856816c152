"""The machine's hands: producing with known fates, Kafka administration, warehouse reads, job processes.

Nothing here decides what is right; tests/random/model.py and the machine do.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import psycopg
from confluent_kafka import KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic, OffsetSpec

from tests.random.formats import WIRE_POISON, Codec
from tests.random.model import Rec, Rows

POISON = (
    "not_json",  # the value is not JSON at all (nor in any wire format: no header)
    "null_value",  # a tombstone
    "missing_field",  # a record without amount_cents
    "nul_in_json_text",  # a well-formed record whose order_id holds "\u0000": Postgres text cannot
    "nul_raw_in_value",  # a raw NUL byte inside a JSON string: not JSON (cut short in a wire format)
    "nul_in_key",  # a well-formed event whose key holds a NUL byte
    "nul_in_header",  # a well-formed event with a header value holding a NUL byte
    *WIRE_POISON,  # a wrong magic byte, an unknown schema id, a truncated message, a wrong message index
)
_WITH_EVENT_ID = ("valid", "nul_in_json_text", "nul_in_key", "nul_in_header")


PLAIN_JSON = Codec("json")


def payload(
    kind: str, n: int, codec: Codec = PLAIN_JSON
) -> tuple[bytes | None, bytes | None, list | None, str | None]:
    """(value, key, headers, event_id) of one record of `kind` in `codec`'s format; n varies the content."""
    event_id = str(uuid.uuid4())
    body = {
        "event_id": event_id,
        "event_type": ("order_created", "order_paid", "order_shipped", "order_cancelled")[n % 4],
        "event_time": f"2026-01-01T00:{n % 60:02d}:{(n * 7) % 60:02d}.{n % 1000:03d}Z",
        "order_id": f"ord-{n:010d}",
        "customer_id": f"cus-{n % 1_000_000:06d}",
        "amount_cents": 100 + n,
        "currency": ("EUR", "USD", "GBP")[n % 3],
        "schema_version": 1,
    }
    if kind != "valid" and kind not in POISON:
        raise ValueError(kind)
    key: bytes | None = body["customer_id"].encode()
    headers = [("source", b"random-schedule")] if n % 3 == 0 else None
    if kind == "nul_in_key":
        key = b"cus\x00" + str(n).encode()
    if kind == "nul_in_header":
        headers = [("trace", b"a\x00b")]
    return codec.value(kind, body, n), key, headers, event_id if kind in _WITH_EVENT_ID else None


class Kafka:
    """One topic name, its incarnations, and producers with delivery reports."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self._txp: Producer | None = None
        self._plain: Producer | None = None
        self._generation = 0
        self.codec = PLAIN_JSON  # the machine's value format (tests/random/formats.py)

    # -- topic administration ------------------------------------------------------------------------
    def create(self, partitions: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            fut = self.admin.create_topics([NewTopic(self.topic, partitions, 1)])[self.topic]
            try:
                fut.result(timeout=30)
                break
            except KafkaException as exc:  # the old incarnation is still being deleted
                if time.monotonic() > deadline:
                    raise
                if "already exists" not in str(exc) and "marked for deletion" not in str(exc).lower():
                    raise
                time.sleep(0.5)
        self._wait(lambda: self.partition_count() == partitions)
        self.reset_producers()

    def delete(self) -> None:
        self.close()
        fut = self.admin.delete_topics([self.topic], operation_timeout=30)[self.topic]
        try:
            fut.result(timeout=30)
        except KafkaException as exc:
            if "UNKNOWN_TOPIC" not in exc.args[0].name():
                raise
        self._wait(lambda: self.partition_count() is None)

    def grow(self, partitions: int) -> None:
        self.admin.create_partitions([NewPartitions(self.topic, partitions)])[self.topic].result(timeout=30)
        self._wait(lambda: self.partition_count() == partitions)
        self.reset_producers()  # fresh metadata: a producer must know the new partitions

    def partition_count(self) -> int | None:
        info = self.admin.list_topics(topic=self.topic, timeout=10).topics.get(self.topic)
        if info is None or info.error is not None or not info.partitions:
            return None
        return len(info.partitions)

    def offsets(self, partition: int) -> tuple[int, int]:
        """(log start, high watermark) of one partition."""
        tp = TopicPartition(self.topic, partition)

        def ask(spec):
            return retried(
                lambda: self.admin.list_offsets({tp: spec})[tp].result(timeout=30).offset, self._fresh_admin
            )

        return ask(OffsetSpec.earliest()), ask(OffsetSpec.latest())

    def delete_records(self, partition: int, before: int) -> int:
        """What retention does; returns the log start afterwards."""
        tp = TopicPartition(self.topic, partition, before)
        retried(lambda: self.admin.delete_records([tp])[tp].result(timeout=30), self._fresh_admin)
        return self.offsets(partition)[0]

    @staticmethod
    def _wait(ok, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not ok():
            if time.monotonic() > deadline:
                raise TimeoutError("Kafka's metadata did not settle")
            time.sleep(0.2)

    # -- producing ----------------------------------------------------------------------------------
    def _fresh_admin(self) -> None:
        self.admin = AdminClient({"bootstrap.servers": self.bootstrap})

    def reset_producers(self) -> None:
        self.close()
        self._generation += 1

    def close(self) -> None:
        for p in (self._txp, self._plain):
            if p is not None:
                p.flush(30)
        self._txp = self._plain = None

    def _transactional(self) -> Producer:
        if self._txp is None:
            self._txp = Producer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "transactional.id": f"{self.topic}-tx",  # a new producer fences the one before
                    "enable.idempotence": True,
                    "linger.ms": 2,
                }
            )
            self._txp.init_transactions(30)
        return self._txp

    def _plain_producer(self) -> Producer:
        if self._plain is None:
            self._plain = Producer(
                {"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "linger.ms": 2}
            )
        return self._plain

    def send(self, records: list[tuple[int, str, int]], fate: str, step: int) -> list[Rec]:
        """Write records [(partition, kind, n)] in one transaction (fate commit/abort) or plainly."""
        reports: dict[int, tuple[int, int] | str] = {}

        def on_delivery(i: int):
            def cb(err, msg) -> None:
                reports[i] = str(err) if err is not None else (msg.partition(), msg.offset())

            return cb

        kinds: dict[int, tuple[str, str | None]] = {}
        producer = self._plain_producer() if fate == "plain" else self._transactional()
        if fate != "plain":
            producer.begin_transaction()
        for i, (partition, kind, n) in enumerate(records):
            value, key, headers, event_id = payload(kind, n, self.codec)
            kinds[i] = (kind, event_id)
            producer.produce(
                self.topic,
                value=value,
                key=key,
                headers=headers,
                partition=partition,
                on_delivery=on_delivery(i),
            )
        producer.flush(30)
        if fate == "abort":
            producer.abort_transaction(30)
            status = "aborted"
        elif fate == "commit":
            producer.commit_transaction(30)
            status = "committed"
        else:
            status = "acknowledged"
        out = []
        for i in range(len(records)):
            got = reports.get(i)
            if not isinstance(got, tuple):
                raise AssertionError(f"the producer could not deliver record {i} of step {step}: {got}")
            out.append(Rec(got[0], got[1], status, kinds[i][0], kinds[i][1], step))
        return out


# -- the warehouse ----------------------------------------------------------------------------------


# What a broker answers for a while after it was paused or restarted, or a new cluster's coordinator
# before it has loaded: the machine's own admin calls wait these out (eosflow's are what is tested).
_PASSING = (
    "NOT_COORDINATOR",
    "COORDINATOR_LOAD_IN_PROGRESS",
    "COORDINATOR_NOT_AVAILABLE",
    "FENCED_LEADER_EPOCH",
    "NOT_LEADER_OR_FOLLOWER",
    "LEADER_NOT_AVAILABLE",
    "UNKNOWN_LEADER_EPOCH",
)


def retried(call, refresh=None, timeout: float = 60.0):
    """call(), again while Kafka answers with an error that passes by itself. `refresh()` before a retry:
    an AdminClient keeps a partition's leader epoch from its metadata, and after a broker restart it is
    answered FENCED_LEADER_EPOCH until that metadata is refreshed (minutes), so the caller makes a new one."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except KafkaException as exc:
            if exc.args[0].name() not in _PASSING or time.monotonic() > deadline:
                raise
            time.sleep(0.5)
            if refresh is not None:
                refresh()


def read_rows(dsn: str, pipeline: str, table: str) -> Rows:
    with psycopg.connect(dsn) as conn:
        output: dict = {}
        (exists,) = conn.execute("select to_regclass(%s) is not null", (table,)).fetchone()
        if exists:
            for t, p, o, e in conn.execute(
                f"select kafka_topic, kafka_partition, kafka_offset, event_id::text from {table}"
            ):
                output.setdefault((t, p, o), []).append(e)
    return Rows(output, read_rejected(dsn, pipeline))


def read_rejected(dsn: str, pipeline: str) -> dict:
    """The pipeline's rejected rows in the ledger (eosflow.rejected), by source coordinates."""
    rejected: dict = {}
    with psycopg.connect(dsn) as conn:
        for t, p, o, err in conn.execute(
            "select kafka_topic, kafka_partition, kafka_offset, error from eosflow.rejected "
            "where pipeline = %s",
            (pipeline,),
        ):
            rejected.setdefault((t, p, o), []).append(err)
    return rejected


def footprint(dsn: str, pipeline: str, rows: Rows) -> tuple:
    """Everything a refused run must leave as it was: rows, ledger rows, positions (compared, never used)."""
    with psycopg.connect(dsn) as conn:
        ledger = conn.execute(
            "select topic, partition, start_offset, end_offset, kind from eosflow.ledger where pipeline = %s "
            "order by 1, 2, 3, 4, 5",
            (pipeline,),
        ).fetchall()
        positions = conn.execute(
            "select topic, partition, next_offset, replays from eosflow.positions where pipeline = %s "
            "order by 1, 2",
            (pipeline,),
        ).fetchall()
    return (sorted(rows.output), sorted(rows.rejected), ledger, positions)


# -- job processes ----------------------------------------------------------------------------------


@dataclass
class Proc:
    popen: subprocess.Popen
    log: Path
    started: float

    def wait(self, timeout: float = 300.0) -> int:
        try:
            return self.popen.wait(timeout=timeout)
        finally:
            self._reap()

    def kill(self) -> None:
        """SIGKILL the job and everything it started (its Spark JVM): a lost machine."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)

    def _reap(self) -> None:
        # The job's own SIGKILL (EOSFLOW_CRASH_AT) leaves its JVM to notice the closed pipe; do not wait.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)

    def tail(self, lines: int = 12) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.strip().splitlines()[-lines:])


def spawn_ingest(pipeline: str, pipelines_file: Path, logdir: Path, args: list[str], **env: str) -> Proc:
    """`eosflow ingest --pipeline P ...` in a process group of its own."""
    logdir.mkdir(parents=True, exist_ok=True)
    log = logdir / f"ingest-{uuid.uuid4().hex[:8]}.log"
    fh = log.open("w")
    popen = subprocess.Popen(
        [sys.executable, "-m", "eosflow.cli", "ingest", "--pipeline", pipeline, *args],
        env=dict(os.environ, EOSFLOW_PIPELINES=str(pipelines_file), **env),
        stdout=fh,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    fh.close()
    return Proc(popen, log, time.monotonic())
