"""Producer retries through a real fault-injecting proxy: the plain producer duplicates, idempotence does not.

The producer bootstraps through toxiproxy, and the broker's PROXIED listener advertises the proxy,
so every request and every response crosses it. While records flow, a few windows drop the broker's
responses on the way back (a downstream `timeout` toxic with timeout 0) while requests still reach
the broker: the broker appends, the producer never sees the ack, its ProduceRequest times out, it
reconnects and sends the same batch again. Without idempotence the broker appends it a second time;
with it, the broker recognises the producer id and sequence numbers and only acknowledges.

Evidence comes from both sides: librdkafka's own log lines (timed-out ProduceRequests) and
statistics (messages transmitted more than once), and the topic read back directly, not through
the proxy, for the copies really written.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from eosflow.errors import StackError
from eosflow.kafka_admin import ensure_topic
from eosflow_dev.lab.proxy import Toxiproxy
from eosflow_dev.produce.events import Event, generate
from eosflow_dev.produce.manifest import Manifest
from eosflow_dev.produce.producer import Delivery, EventProducer
from eosflow_dev.produce.readback import read_topic
from eosflow_dev.stack.settings import StackSettings

PROXY_NAME = "kafka"
TOXIC_NAME = "drop_responses"
# Drop every byte from the broker until the toxic is removed (timeout 0: never close on its own;
# removing it closes the affected connections). Requests still arrive and are appended.
TOXIC_TYPE = "timeout"
TOXIC_STREAM = "downstream"
TOXIC_ATTRIBUTES = {"timeout": 0}

REQUEST_TIMEOUT_MS = 1500  # a lost ack is noticed (and the batch resent) this long after sending
STATS_INTERVAL_MS = 250
WINDOWS = 3  # fault windows per run, at most
# Longer than REQUEST_TIMEOUT_MS plus librdkafka's 1 s timeout scan, so in-flight requests time out.
WINDOW_S = 3.0
# How long after a window its timed-out requests may still be logged: a request sent in its last moment
# times out REQUEST_TIMEOUT_MS later, at librdkafka's next 1 s scan, logged at the next poll. With 1 s, a CI
# run counted a window as faultless whose request was logged timed out afterwards (the trial then failed).
CONFIRM_S = REQUEST_TIMEOUT_MS / 1000 + 1.5
RATE_PER_S = 300  # records per second: production spans the windows instead of ending in 0.1 s

_PRODUCE_TIMEOUT = re.compile(r"Timed out ProduceRequest in flight")
_TIMED_OUT_SUMMARY = re.compile(r"Timed out (\d+) in-flight")  # librdkafka names only the first 5
_DISCONNECTED = re.compile(r"Disconnected")


@dataclass(frozen=True)
class RetryResult:
    topic: str
    idempotent: bool
    manifest: Manifest
    faults: int  # windows injected (toxic added, then removed) in which ProduceRequests timed out
    retries_seen: int  # messages librdkafka transmitted more than once (stats: txmsgs - msgs)
    duplicates_in_topic: int  # extra copies of our events in the topic (3 copies of one count 2)
    detail: str  # one line of evidence
    lost_acknowledged: int = 0  # acknowledged events missing from the topic


class _Observed(logging.Handler):
    """What librdkafka tells us through stats_cb, error_cb and its log; fed on the polling thread."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.mutex = threading.Lock()  # not Handler.lock, which logging takes around emit()
        self.produce_timeouts = 0  # "Timed out ProduceRequest in flight" log lines
        self.requests_timed_out = 0  # in-flight requests of any kind, from the per-broker summary lines
        self.disconnects = 0
        self.resent = 0  # messages transmitted more than once, per the latest stats
        self.backlog = 0  # messages queued or in flight, per the latest stats
        self.broker_up = False  # the real broker (not the bootstrap entry) is connected
        self.brokers: set[str] = set()
        self.errors: Counter[str] = Counter()
        self.stats_seen = 0

    def on_stats(self, raw: str) -> None:
        stats = json.loads(raw)
        # Broker counters (txretries, req_timeouts) restart whenever librdkafka recreates the broker
        # after a disconnect; partition counters last the whole run, so resends are counted there.
        partitions = [p for t in stats.get("topics", {}).values() for p in t.get("partitions", {}).values()]
        real = {name: b for name, b in stats.get("brokers", {}).items() if b.get("nodeid", -1) >= 0}
        with self.mutex:
            self.resent = sum(p["txmsgs"] - p["msgs"] for p in partitions if p.get("partition", -1) >= 0)
            self.backlog = stats.get("msg_cnt", 0)
            self.broker_up = any(b.get("state") == "UP" for b in real.values())
            self.brokers |= set(real)
            self.stats_seen += 1

    def on_error(self, err) -> None:
        with self.mutex:
            self.errors[err.name()] += 1

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        with self.mutex:
            if _PRODUCE_TIMEOUT.search(message):
                self.produce_timeouts += 1
            elif summary := _TIMED_OUT_SUMMARY.search(message):
                self.requests_timed_out += int(summary.group(1))
            elif _DISCONNECTED.search(message):
                self.disconnects += 1

    def read(self, name: str):
        with self.mutex:
            return getattr(self, name)


class _ObservedProducer(EventProducer):
    """EventProducer that can serve callbacks after its last send (for the final stats)."""

    def poll(self, timeout: float) -> None:
        self._producer.poll(timeout)


class _Faults(threading.Thread):
    """Opens fault windows while records are produced, each once the producer runs normally again."""

    def __init__(self, proxy: Toxiproxy, observed: _Observed, produced: Callable[[], int], log) -> None:
        super().__init__(name="producer-retries-faults", daemon=True)
        self.proxy = proxy
        self.observed = observed
        self.produced = produced
        self.log = log
        self.done = threading.Event()
        self.windows = 0
        self.confirmed = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while self.windows < WINDOWS and not self.done.is_set():
                if self._steady():
                    self._window()
        except BaseException as exc:  # reported by the caller, not lost in a thread
            self.error = exc

    def _steady(self, timeout: float = 10.0) -> bool:
        """Wait for records flowing to a connected broker with little backlog: a fair start."""
        seen = self.observed.read("stats_seen")
        deadline = time.monotonic() + timeout
        while not self.done.wait(STATS_INTERVAL_MS / 1000):
            fresh = self.observed.read("stats_seen") >= seen + 2
            flowing = fresh and self.produced() > 0 and self.observed.read("broker_up")
            if flowing and (self.observed.read("backlog") < RATE_PER_S // 2 or time.monotonic() > deadline):
                return True
        return False

    def _window(self) -> None:
        before = self.observed.read("produce_timeouts")
        self.proxy.add_toxic(PROXY_NAME, TOXIC_NAME, TOXIC_TYPE, TOXIC_STREAM, TOXIC_ATTRIBUTES)
        try:
            time.sleep(WINDOW_S)
        finally:
            self.proxy.remove_toxic(PROXY_NAME, TOXIC_NAME)
        self.windows += 1
        # A window counts only if ProduceRequests were really in flight when their responses vanished:
        # librdkafka then logs them timed out (log lines reach us on the producer's next poll).
        deadline = time.monotonic() + CONFIRM_S
        timed_out = 0
        while not timed_out and time.monotonic() < deadline:
            timed_out = self.observed.read("produce_timeouts") - before
            time.sleep(0.05)
        if timed_out:
            self.confirmed += 1
            self.log(f"fault window {self.windows}: {timed_out} ProduceRequest(s) timed out, responses lost")
        else:
            self.log(f"fault window {self.windows}: no ProduceRequest was in flight, not counted")


def _paced(events: Iterator[Event], rate: float, counter: list[int]) -> Iterator[Event]:
    started = time.monotonic()
    for n, event in enumerate(events):
        ahead = n / rate - (time.monotonic() - started)
        if ahead > 0:
            time.sleep(ahead)
        counter[0] = n + 1
        yield event


def _client_logger(topic: str, handler: logging.Handler) -> logging.Logger:
    """librdkafka's log for this run goes to `handler` only: expected REQTMOUT noise stays off stderr.

    A registered logger (getLogger), because the manifest deep-copies the Delivery and only those copy.
    """
    logger = logging.getLogger(f"eosflow_dev.lab.producer_retries.librdkafka.{topic}")
    logger.handlers = [handler]
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return logger


def run_producer_retries(
    settings: StackSettings,
    proxy: Toxiproxy,
    topic: str,
    idempotent: bool,
    records: int = 3000,
    seed: int = 11,
    log=print,
) -> RetryResult:
    """Produce `records` events through the proxy with the broker's responses dropped in a few windows."""
    if not settings.kafka_proxied_port:
        raise StackError(
            "the broker has no PROXIED listener: set EOSFLOW_KAFKA_PROXIED_PORT (and "
            "EOSFLOW_KAFKA_PROXY_PORT) and restart the stack (`eosflow stack down && eosflow stack up`)"
        )
    host = settings.kafka_host
    proxy.create_proxy(
        PROXY_NAME, f"{host}:{settings.kafka_proxy_port}", f"{host}:{settings.kafka_proxied_port}"
    )
    ensure_topic(settings.bootstrap_servers, topic, 3, log=log)

    observed = _Observed()
    delivery = Delivery(
        acks="all",
        idempotence=idempotent,
        extra={
            # librdkafka's own deadline for a ProduceRequest is socket.timeout.ms (request.timeout.ms
            # is the broker's ack timeout): short, so a lost response means a resend soon.
            "socket.timeout.ms": REQUEST_TIMEOUT_MS,
            "request.timeout.ms": REQUEST_TIMEOUT_MS,
            "message.timeout.ms": 120_000,  # nothing may fail for want of time: we count copies
            # Recover fast once the toxic is gone: a connection set up inside the window waits this long.
            "socket.connection.setup.timeout.ms": 3000,
            "reconnect.backoff.max.ms": 500,
            # Several requests in flight, so a lost window holds several batches; 5 is the idempotent cap.
            "max.in.flight.requests.per.connection": 5 if idempotent else 20,
            "statistics.interval.ms": STATS_INTERVAL_MS,
            # Plain functions, not bound methods: the manifest deep-copies the Delivery, lock and all.
            "stats_cb": lambda raw: observed.on_stats(raw),
            "error_cb": lambda err: observed.on_error(err),
            "logger": _client_logger(topic, observed),
        },
    )
    producer = _ObservedProducer(settings.proxied_bootstrap_servers, topic, delivery, seed=seed)
    # Callables are not manifest material: keep the manifest's settings JSON-writable.
    producer.manifest.settings["extra"] = {
        k: (v if isinstance(v, str | int | float | bool) else f"<{type(v).__name__}>")
        for k, v in delivery.extra.items()
    }

    produced = [0]
    faults = _Faults(proxy, observed, lambda: produced[0], log)
    started = time.monotonic()
    faults.start()
    try:
        producer.send(_paced(generate(seed, records), RATE_PER_S, produced))
        faults.done.set()
        faults.join(timeout=WINDOW_S + 10)
        producer.close()
        # Two more stats reports after the last delivery, so the counters are final.
        seen = observed.read("stats_seen")
        deadline = time.monotonic() + 5
        while observed.read("stats_seen") < seen + 2 and time.monotonic() < deadline:
            producer.poll(0.1)
    finally:
        faults.done.set()
        # Detach this run's observer (a NullHandler, or logging's last resort would print to stderr).
        delivery.extra["logger"].handlers = [logging.NullHandler()]
        if any(t["name"] == TOXIC_NAME for t in proxy.toxics(PROXY_NAME)):
            proxy.remove_toxic(PROXY_NAME, TOXIC_NAME)  # interrupted mid-window: leave the proxy clean
    if faults.error is not None:
        raise StackError(f"injecting faults through toxiproxy failed: {faults.error}") from faults.error
    elapsed = time.monotonic() - started

    outside = sorted(b for b in observed.brokers if not b.startswith(f"{host}:{settings.kafka_proxy_port}/"))
    if outside:
        raise StackError(
            f"the producer talked to {', '.join(outside)}, not only to the proxy on port "
            f"{settings.kafka_proxy_port}: the broker does not advertise the proxy for its PROXIED listener. "
            "Restart the stack with EOSFLOW_KAFKA_PROXIED_PORT and EOSFLOW_KAFKA_PROXY_PORT set."
        )

    manifest = producer.manifest
    ours = {row.event_id for row in manifest.rows}
    copies = Counter(r.event_id for r in read_topic(settings.bootstrap_servers, topic) if r.event_id in ours)
    acknowledged = {row.event_id for row in manifest.visible()}
    duplicates = sum(n - 1 for n in copies.values() if n > 1)
    lost = sum(1 for eid in acknowledged if not copies[eid])
    counts = manifest.counts()
    detail = (
        f"{'idempotent' if idempotent else 'plain'} producer via toxiproxy ({TOXIC_STREAM} {TOXIC_TYPE} "
        f"toxic): {faults.confirmed}/{faults.windows} windows of {WINDOW_S:.0f}s with responses lost; "
        f"{observed.requests_timed_out} in-flight requests timed out and {observed.disconnects} disconnects "
        f"logged, {observed.resent} messages sent again (librdkafka stats); acknowledged "
        f"{counts['acknowledged']}/{records}, failed {counts['failed']}; the topic holds "
        f"{sum(copies.values())} copies of {len(copies)} events: {duplicates} duplicates, "
        f"{lost} acknowledged missing; {elapsed:.1f}s"
    )
    log(detail)
    return RetryResult(
        topic=topic,
        idempotent=idempotent,
        manifest=manifest,
        faults=faults.confirmed,
        retries_seen=observed.resent,
        duplicates_in_topic=duplicates,
        detail=detail,
        lost_acknowledged=lost,
    )
