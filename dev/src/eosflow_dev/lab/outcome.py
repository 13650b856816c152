"""What one lab trial measured, and how loss and duplication are counted.

Lost and duplicated are computed from the producer's manifest and the rows really in the
warehouse table, never from eosflow's own ledger: the lab must be able to catch eosflow lying.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from eosflow_dev.produce.manifest import Manifest

if TYPE_CHECKING:
    from eosflow_dev.lab.changes import Replica


@dataclass(frozen=True)
class Tally:
    produced: int  # records the producer tried to send
    acknowledged: int  # records the broker confirmed (acks) or that a committed transaction holds
    committed: int  # distinct acknowledged events present in the warehouse
    lost: int  # acknowledged events absent from the warehouse
    duplicated: int  # extra warehouse rows beyond one per event (3 copies of an event count 2)


def tally(manifest: Manifest, warehouse_event_ids: Iterable[str]) -> Tally:
    """Judge a warehouse table against the manifest of the producer that fed it."""
    acknowledged = {row.event_id for row in manifest.visible()}
    ours = {row.event_id for row in manifest.rows}
    seen = Counter(eid for eid in warehouse_event_ids if eid in ours)
    return Tally(
        produced=len(manifest.rows),
        acknowledged=len(acknowledged),
        committed=sum(1 for eid in acknowledged if seen[eid]),
        lost=sum(1 for eid in acknowledged if not seen[eid]),
        duplicated=sum(n - 1 for n in seen.values() if n > 1),
    )


@dataclass(frozen=True)
class Trial:
    """One row of the lab report."""

    scenario: str  # e.g. "crash in_commit", "producer retries via proxy"
    mode: str  # consumer delivery mode: at_most_once | at_least_once | exactly_once
    producer: str  # e.g. "transactional", "acks=1", "acks=all", "idempotent", "plain"
    trial: int
    produced: int
    acknowledged: int
    committed: int
    lost: int
    duplicated: int
    invariants: str  # "pass", "fail: <names>", or "n/a"
    faults: int  # faults injected AND confirmed to have happened
    fault_detail: str  # what was done, with evidence (pids before/after, retries seen, ...)
    # A change stream's state table against the source table (eosflow_dev.lab.changes); None: no replica.
    replica_missing: int | None = None  # live in the source, absent
    replica_stale: int | None = None  # present, some column differs
    replica_extra: int | None = None  # deleted in the source, present

    @classmethod
    def columns(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    @property
    def replica(self) -> tuple[int, int, int] | None:
        """(missing, stale, extra), or None for a trial whose pipeline keeps no replica."""
        if self.replica_missing is None or self.replica_stale is None or self.replica_extra is None:
            return None
        return self.replica_missing, self.replica_stale, self.replica_extra

    @classmethod
    def of(
        cls,
        scenario: str,
        mode: str,
        producer: str,
        trial: int,
        t: Tally,
        replica: Replica | None = None,
        **rest,
    ) -> Trial:
        if replica is not None:
            rest |= {
                "replica_missing": replica.missing,
                "replica_stale": replica.stale,
                "replica_extra": replica.extra,
            }
        return cls(
            scenario=scenario,
            mode=mode,
            producer=producer,
            trial=trial,
            produced=t.produced,
            acknowledged=t.acknowledged,
            committed=t.committed,
            lost=t.lost,
            duplicated=t.duplicated,
            **rest,
        )
