"""Lost acks through a real fault-injecting proxy: the plain producer duplicates, the idempotent one does not.

A private stack (ports 19400-19405, its own state folder) with the broker's PROXIED listener on, and
toxiproxy in front of it; all started once for the module and stopped and wiped afterwards.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections import Counter
from unittest import mock

import pytest

from eosflow import settings as settings_mod
from eosflow import stack
from eosflow.lab import proxy
from eosflow.lab.producer_retries import RetryResult, run_producer_retries
from eosflow.produce.readback import read_topic
from eosflow.stack.postgres import PostgresService
from eosflow.stack.process import port_is_free

pytestmark = pytest.mark.integration

PORTS = {
    "EOSFLOW_KAFKA_PORT": 19400,
    "EOSFLOW_KAFKA_CONTROLLER_PORT": 19401,
    "EOSFLOW_PG_PORT": 19402,
    "EOSFLOW_KAFKA_PROXIED_PORT": 19403,
    "EOSFLOW_KAFKA_PROXY_PORT": 19404,
    "EOSFLOW_TOXIPROXY_PORT": 19405,
}
RECORDS = 3000


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """(settings, toxiproxy) of a private stack behind a proxy; everything gone afterwards."""
    state_dir = tmp_path_factory.mktemp("producer-retries") / "state"
    env = {"EOSFLOW_STATE_DIR": str(state_dir), **{k: str(v) for k, v in PORTS.items()}}
    with mock.patch.dict(os.environ, env):
        s = settings_mod.load()
    quiet = lambda msg: None  # noqa: E731
    toxiproxy = proxy.Toxiproxy(proxy.build(s.root, log=quiet), s.state_dir / "toxiproxy", s.kafka_host)
    pg_home = PostgresService(s).home  # may be outside state_dir (/var/tmp) when run as root
    try:
        stack.up(s, log=quiet)
        toxiproxy.start(s.toxiproxy_api_port, log=quiet)
        yield s, toxiproxy
    finally:
        toxiproxy.stop(log=quiet)
        stack.reset(s, log=quiet)  # down, then wipe Kafka's log and the private Postgres cluster
        shutil.rmtree(state_dir, ignore_errors=True)
    # The private stack really went away: nothing listens, no cluster left behind.
    assert all(port_is_free(s.kafka_host, p) for p in PORTS.values()), "a lab port is still in use"
    assert not pg_home.exists() and not state_dir.exists()


def _run(lab, idempotent: bool) -> tuple[RetryResult, Counter]:
    s, toxiproxy = lab
    topic = f"lab.producer-retries.{'idempotent' if idempotent else 'plain'}.{uuid.uuid4().hex[:8]}"
    result = run_producer_retries(s, toxiproxy, topic, idempotent, records=RECORDS, log=lambda msg: None)
    print(result.detail)  # the evidence, shown with -s or on failure
    # Count copies independently of the scenario: the topic read straight from the broker, not the proxy.
    copies = Counter(r.event_id for r in read_topic(s.bootstrap_servers, topic, "read_uncommitted"))
    return result, copies


def test_the_plain_producer_writes_duplicates_when_acks_are_lost(lab):
    result, copies = _run(lab, idempotent=False)

    assert result.faults > 0, result.detail  # responses really were dropped with requests in flight
    assert result.retries_seen > 0, result.detail  # and the producer really resent
    assert result.duplicates_in_topic > 0, result.detail
    assert sum(n - 1 for n in copies.values()) == result.duplicates_in_topic, result.detail
    # Each duplicate is a resend: never more copies than messages sent again.
    assert result.duplicates_in_topic <= result.retries_seen, result.detail
    assert len(copies) == RECORDS and result.lost_acknowledged == 0, result.detail


def test_the_idempotent_producer_writes_no_duplicates_under_the_same_faults(lab):
    result, copies = _run(lab, idempotent=True)

    assert result.faults > 0, result.detail
    assert result.retries_seen > 0, result.detail  # it resent too: the broker discarded the copies
    assert result.duplicates_in_topic == 0, result.detail
    assert max(copies.values()) == 1, result.detail
    acknowledged = {row.event_id for row in result.manifest.visible()}
    assert len(acknowledged) == RECORDS, result.detail  # nothing failed for want of time
    assert acknowledged <= set(copies), result.detail  # every acknowledged event is in the topic
    assert result.lost_acknowledged == 0, result.detail
