"""An outbox table of its own for one test, declared as a publisher beside the case's pipeline."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import psycopg
import yaml

from eosflow.publish.declaration import load_publisher
from eosflow.publish.run import publish
from tests import horizon
from tests.kafka_reader import read_all


class Outbox:
    def __init__(self, case, **declared) -> None:
        self.case, self.settings = case, case.settings
        self.table = f"outbox.{case.name}"
        self.topic = f"published.{case.name}"
        with psycopg.connect(self.settings.warehouse_dsn, autocommit=True) as conn:
            conn.execute("create schema if not exists outbox")
            conn.execute(
                f"create table {self.table} (id bigserial primary key, aggregate text not null, "
                "body jsonb not null, at timestamptz not null default now())"
            )
        spec = {
            "table": self.table,
            "topic": self.topic,
            "id": "id",
            "key": "aggregate",
            "batch_rows": 50,
            "batch_seconds": 0.2,
            **declared,
        }
        case.config_path.write_text(
            yaml.safe_dump({"pipelines": {case.name: case.spec}, "publishers": {case.name: spec}})
        )
        self.publisher = load_publisher(self.settings, case.name, case.config_path)

    def insert(self, conn, n: int, aggregate: str = "a") -> None:
        for i in range(n):
            conn.execute(
                f"insert into {self.table} (aggregate, body) values (%s, %s)",
                (aggregate, json.dumps({"i": i})),
            )

    def publish(self, settle: bool = True, **kw):
        """One publish, by default after every committed row is below the horizon (tests/horizon.py)."""
        if settle:
            horizon.settle(self.settings.warehouse_dsn, self.publisher)
        return publish(self.settings, self.publisher, log=lambda m: None, **kw)

    def published_ids(self, isolation: str = "read_committed") -> Counter:
        return Counter(
            int(dict(m.headers())["eosflow-row-id"]) for m in read_all(self.settings, self.topic, isolation)
        )

    def ids(self) -> list[int]:
        with psycopg.connect(self.settings.warehouse_dsn) as conn:
            return [r[0] for r in conn.execute(f"select id from {self.table}")]

    def cli(self, *args: str, **env: str):
        horizon.settle(self.settings.warehouse_dsn, self.publisher)
        return subprocess.Popen(
            [sys.executable, "-m", "eosflow.cli", "publish", "--pipeline", self.case.name, *args],
            env=self.case.env(**env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
