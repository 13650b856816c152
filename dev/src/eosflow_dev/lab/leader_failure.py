"""Leader failure: does an acknowledged record survive the death of the partition leader?

The window in which acks=1 loses data is real but short: the leader has appended and acknowledged
a record its followers have not fetched yet, then dies. To open that window deterministically, the
followers are frozen (SIGSTOP) first. They stay in the ISR (replica.lag.time.max.ms is far longer
than the freeze), so they remain eligible leaders, but they fetch nothing. Then:

- acks=1: the leader acknowledges the second half alone. It is SIGKILLed, the followers thaw, one of
  them becomes leader without those records, and the acknowledged records are gone.
- acks=all (idempotent, min.insync.replicas=2): no acknowledgement can come while the ISR is frozen.
  After the kill the producer retries against the new leader, and only then are records acknowledged.

Loss is counted against the producer's manifest and a plain read of the topic from the survivors.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass

from eosflow.errors import StackError
from eosflow_dev.lab.cluster import KraftCluster
from eosflow_dev.produce.events import generate
from eosflow_dev.produce.manifest import Manifest
from eosflow_dev.produce.producer import Delivery, EventProducer
from eosflow_dev.produce.readback import read_topic
from eosflow_dev.stack import process
from eosflow_dev.stack.kafka import quiet_logger

FREEZE_WINDOW_S = 2.0  # how long acks may arrive while the followers are frozen; < broker session timeout
MESSAGE_TIMEOUT_MS = 60_000  # the producer keeps retrying across the failover for this long


@dataclass(frozen=True)
class LeaderFailureResult:
    topic: str
    acks: str
    manifest: Manifest  # the producer's manifest
    killed_node: int  # the leader that was SIGKILLed
    new_leader: int  # the node that took over (differs from killed_node)
    acknowledged_before_kill: int  # acks received while the followers were frozen, before the kill
    lost_in_topic: int  # acknowledged events not readable from the topic after failover
    survivors: str  # bootstrap of the surviving nodes, for the ingestion that follows
    detail: str  # one line of evidence: pids, node ids, counts, timings


def delivery_for(acks: str) -> Delivery:
    extra = {"message.timeout.ms": str(MESSAGE_TIMEOUT_MS)}
    if acks == "1":
        return Delivery(acks="1", idempotence=False, extra=extra)
    if acks == "all":
        return Delivery(acks="all", idempotence=True, extra=extra)
    raise ValueError(f"the leader-failure scenario compares acks=1 and acks=all, not acks={acks!r}")


def run_leader_failure(
    cluster: KraftCluster, topic: str, acks: str, records: int = 2000, seed: int = 7, log=print
) -> LeaderFailureResult:
    """Produce half the records replicated, freeze the followers, produce the rest, kill the leader.

    Starts any node of the cluster that is not running first (a previous run leaves its victim dead);
    leaves the killed node dead, so `survivors` is what the ingestion that follows must read from.
    """
    delivery = delivery_for(acks)
    if records < 2:
        raise ValueError(f"records must be at least 2 (half before the freeze, half during), not {records}")
    cluster.start(log=log)
    cluster.create_topic(topic, partitions=1, replication=3, min_insync=2)
    state = cluster.partition(topic)
    leader = state.leader
    followers = [n for n in state.replicas if n != leader]
    # A side topic led and followed by the same nodes, so its records travel in the same replica
    # fetch requests as the measured topic's (see _Drain).
    drain_topic = f"{topic}.drain"
    cluster.create_topic(drain_topic, min_insync=2, assignment=[[leader, *followers]])
    drain = _Drain(cluster.bootstrap_of([leader]), drain_topic)
    events = list(generate(seed, records))
    first, second = events[: records // 2], events[records // 2 :]

    producer = EventProducer(cluster.bootstrap_servers, topic, delivery, seed=seed)
    closed = False
    frozen: list[int] = []
    try:
        # 1. Half the records, acknowledged and fully replicated to all three nodes.
        producer.send(first)
        acked = [row for row in producer.manifest.rows if row.status == "acknowledged"]
        if len(acked) != len(first):
            raise StackError(f"only {len(acked)} of {len(first)} records were acknowledged before the fault")
        drain.mark()
        # With acks=1 an ack does not mean the followers have the record: wait until the high
        # watermarks (the offset every ISR member has reached) cover the first half and the
        # marker, or the freeze below would cost first-half records too and blur what is measured.
        # The marker being replicated also proves the followers' fetches include the side topic.
        end = max(row.offset for row in acked) + 1

        def replicated() -> bool:
            return cluster.high_watermark(topic) >= end and cluster.high_watermark(drain_topic) >= 1

        if not process.wait_until(replicated, 30.0, interval=0.1):
            raise StackError(
                f"{topic}[0]: the followers did not replicate the first {end} records within 30s "
                f"(high watermark {cluster.high_watermark(topic)})"
            )
        state = cluster.partition(topic)
        if state.leader != leader or sorted(state.isr) != sorted(state.replicas):
            raise StackError(f"{topic}[0] changed or fell out of sync before the fault: {state}")
        leader_pid = cluster.pid(leader)
        follower_pids = {n: cluster.pid(n) for n in followers}

        # 2. Freeze both followers: they stay in the ISR but fetch nothing.
        for node in followers:
            cluster.pause(node)
            frozen.append(node)
        frozen_at = time.monotonic()
        drain.mark()  # answers the fetch each follower left parked at the leader
        time.sleep(0.5)  # the leader answers parked fetches right after the append
        log(f"{topic}: leader node {leader} (pid {leader_pid}); froze followers {follower_pids}")

        # 3. The second half, from a thread, since send() flushes and acks=all cannot finish yet.
        sender_error: list[BaseException] = []

        def send_second() -> None:
            try:
                producer.send(second)
            except BaseException as exc:  # reported after the join
                sender_error.append(exc)

        sender = threading.Thread(target=send_second, name="leader-failure-sender", daemon=True)
        sender.start()
        sender.join(timeout=FREEZE_WINDOW_S)

        # 4. Kill the leader while the followers are still frozen, then thaw them.
        cluster.kill(leader)
        killed_at = time.monotonic()
        if leader_pid is not None and process.pid_alive(leader_pid):
            raise StackError(f"node {leader} (pid {leader_pid}) survived SIGKILL")
        # Count the acks only now: responses the leader sent just before dying may still be on
        # their way to the producer. With both followers frozen no other node can ack anything
        # yet, so every ack counted here came from the killed leader.
        time.sleep(0.3)
        second_ids = {e.event_id for e in second}
        acked_before_kill = sum(
            1
            for row in list(producer.manifest.rows)
            if row.event_id in second_ids and row.status == "acknowledged"
        )
        for node in followers:
            cluster.resume(node)
        frozen.clear()
        log(
            f"{topic}: {acked_before_kill}/{len(second)} acks in the {killed_at - frozen_at:.1f}s freeze; "
            f"SIGKILLed node {leader} (pid {leader_pid}), thawed {followers}"
        )

        # 5. Failover, then let the producer finish against the new leader.
        new_leader = cluster.wait_new_leader(topic, 0, not_node=leader, timeout_s=60)
        failover_s = time.monotonic() - killed_at
        log(f"{topic}: node {new_leader} leads after {failover_s:.1f}s")
        flush_limit_s = MESSAGE_TIMEOUT_MS / 1000 + 30
        sender.join(timeout=flush_limit_s)
        if sender.is_alive():
            raise StackError(f"the producer was still flushing {flush_limit_s:.0f}s after the failover")
        if sender_error:
            raise sender_error[0]
        producer.close()
        closed = True
        finished_s = time.monotonic() - killed_at
    finally:
        for node in frozen:  # never leave a node frozen behind an error
            cluster.resume(node)
        if not closed:
            producer.close()

    # 6. Read back from the survivors and judge the manifest.
    survivors = cluster.bootstrap_of(n for n in cluster.nodes if n != leader)
    acknowledged = {row.event_id for row in producer.manifest.visible()}
    in_topic = _settled_read(survivors, topic)
    lost = len(acknowledged - set(in_topic))
    duplicated = sum(n - 1 for n in Counter(in_topic).values() if n > 1)
    counts = {k: v for k, v in producer.manifest.counts().items() if v}
    detail = (
        f"acks={acks}: leader node {leader} pid {leader_pid} SIGKILLed (gone) "
        f"{killed_at - frozen_at:.1f}s after freezing followers {followers} pids "
        f"{[follower_pids[n] for n in followers]}; {acked_before_kill}/{len(second)} acked during freeze; "
        f"node {new_leader} leader {failover_s:.1f}s after kill, producer done after {finished_s:.1f}s; "
        f"manifest {counts}; topic holds {len(in_topic)} records ({duplicated} duplicates); "
        f"{lost} of {len(acknowledged)} acknowledged events missing"
    )
    log(detail)
    return LeaderFailureResult(
        topic=topic,
        acks=acks,
        manifest=producer.manifest,
        killed_node=leader,
        new_leader=new_leader,
        acknowledged_before_kill=acked_before_kill,
        lost_in_topic=lost,
        survivors=survivors,
        detail=detail,
    )


class _Drain:
    """Marker records the frozen followers' last fetch requests can take instead of ours.

    A follower usually has a fetch request parked at the leader when it is frozen (the leader
    holds it up to replica.fetch.wait.max.ms for new data). The next append answers it, and that
    response waits in the frozen follower's socket, to be applied when it thaws. Without a marker,
    the first produce batch of the second half rides along and survives, so the loss depends on
    batching luck (seen: 79 of 1000 lost, and once 0 of 1000). The markers go to a side topic
    with the same leader and followers, hence the same fetch requests, never to the measured topic.
    """

    def __init__(self, leader_bootstrap: str, topic: str) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self._producer = Producer(
            {
                "bootstrap.servers": leader_bootstrap,
                "acks": "1",
                "linger.ms": 0,
                # It outlives the leader it talks to; its complaints are noise.
                "logger": quiet_logger("eosflow_dev.lab.cluster.client"),
            }
        )

    def mark(self) -> None:
        self._producer.produce(self.topic, value=b"drain parked replica fetches")
        if self._producer.flush(15) != 0:
            raise StackError(f"the leader did not acknowledge a marker on {self.topic} within 15s")


def _settled_read(bootstrap: str, topic: str, tries: int = 5) -> list[str]:
    """Event ids in the topic, read until two reads agree.

    A plain read stops at the high watermark, which trails the new leader's log until the other
    survivor has fetched: one early read could count a record as lost that is merely not yet
    visible. Two equal reads a second apart mean the watermark has settled.
    """
    previous: list[str] | None = None
    for _ in range(tries):
        ids = [r.event_id for r in read_topic(bootstrap, topic, "read_uncommitted") if r.event_id]
        if previous is not None and len(ids) == len(previous):
            return ids
        previous = ids
        time.sleep(1.0)
    return previous or []
