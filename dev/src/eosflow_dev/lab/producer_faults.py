"""Faults on the producer side, carried through to the warehouse.

Producer retries through toxiproxy (idempotence off and on) and a partition leader killed right
after acknowledging (acks=1 and acks=all). The consumer is exactly_once in both, so whatever the
warehouse lacks or holds twice went wrong between the producer and the broker.
"""

from __future__ import annotations

from collections.abc import Sequence

from eosflow_dev.lab.outcome import Trial
from eosflow_dev.lab.world import CLUSTER_BASE_PORT, Lab, LabPipeline


def producer_retries(lab: Lab, cells: Sequence[tuple[str, int]]) -> list[Trial]:
    from eosflow_dev.lab import proxy
    from eosflow_dev.lab.producer_retries import run_producer_retries

    toxiproxy = proxy.Toxiproxy(
        proxy.build(lab.settings.root, log=lab.log),
        lab.settings.state_dir / "toxiproxy",
        lab.settings.kafka_host,
    )
    toxiproxy.start(lab.settings.toxiproxy_api_port, log=lab.log)
    out = []
    try:
        for mode, trial in cells:
            for idempotent in (False, True):
                producer = "idempotent" if idempotent else "plain (no idempotence)"
                p = lab.pipeline("producer_retries", mode, trial)
                result = run_producer_retries(
                    lab.settings,
                    toxiproxy,
                    p.topic,
                    idempotent,
                    records=max(lab.records, 1500),  # production must span the fault windows
                    seed=lab.seed + trial,
                    log=lambda m: None,
                )
                result.manifest.write(lab.home / "manifests" / f"{p.name}.json")
                faults = result.faults if result.retries_seen > 0 else 0  # windows where resends happened
                out.append(
                    _ingested(lab, "producer retries via toxiproxy", producer, p, trial, result, faults)
                )
    finally:
        toxiproxy.stop(log=lab.log)
    return out


def leader_failure(lab: Lab, cells: Sequence[tuple[str, int]]) -> list[Trial]:
    from eosflow_dev.lab.cluster import KraftCluster
    from eosflow_dev.lab.leader_failure import run_leader_failure

    cluster = KraftCluster(lab.settings.state_dir / "cluster", lab.settings, base_port=CLUSTER_BASE_PORT)
    lab.log("starting a three-broker KRaft cluster for the leader-failure scenario")
    cluster.wipe()  # a previous lab's brokers and logs: every run starts from a fresh cluster
    cluster.start(log=lab.log)
    out = []
    todo = [(mode, trial, acks) for mode, trial in cells for acks in ("1", "all")]
    try:
        for n, (mode, trial, acks) in enumerate(todo, 1):
            p = lab.pipeline(f"leader_failure_acks{acks}", mode, trial)
            result = run_leader_failure(
                cluster, p.topic, acks, records=max(lab.records, 1000), seed=lab.seed + trial, log=lab.log
            )
            result.manifest.write(lab.home / "manifests" / f"{p.name}.json")
            if n < len(todo):
                # The next trial needs the killed node back (run_leader_failure waits for it): its JVM boots
                # while this trial is ingested from the survivors and judged, not after (7-15 s of a start).
                cluster.start(log=lab.log, wait=False)
            survivor = result.survivors.split(",")[0].rsplit(":", 1)[1]
            producer = "acks=1" if acks == "1" else "acks=all, min.insync.replicas=2"
            faults = int(result.killed_node != result.new_leader)  # a real failover happened
            scenario = "leader killed after acking"
            out.append(_ingested(lab, scenario, producer, p, trial, result, faults, survivor))
    finally:
        cluster.wipe()
    return out


def _ingested(
    lab: Lab,
    scenario: str,
    producer: str,
    p: LabPipeline,
    trial: int,
    result,
    faults: int,
    kafka_port: str | None = None,
) -> Trial:
    """Ingest what the producer left in the topic, exactly once, then judge the warehouse."""
    env = {"EOSFLOW_KAFKA_PORT": kafka_port} if kafka_port else {}
    job = lab.run_job(p, "r1", **env)
    detail = result.detail + (f"; ingest exit {job.returncode}" if job.returncode else "")
    if job.returncode:
        detail += f" ({job.tail(3)})"
    lab.log(f"  {scenario} [{producer}] trial {trial}: {detail}")
    return Trial.of(
        scenario,
        p.mode,
        producer,
        trial,
        lab.measure(p, result.manifest),
        invariants=lab.invariants(p),
        faults=faults,
        fault_detail=detail,
    )
