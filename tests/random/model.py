"""The randomized schedule's model: what the warehouse must hold, built from the producer's side only.

Every record the machine produced is here with its coordinates (from the delivery report), its fate
(the transaction's outcome, or the broker's acknowledgement) and its payload class (valid: an output
row with its event id; poison: a rejected row). Retention is recorded as "offsets below X of
partition p were deleted at step n"; the committed records below X that were not in the warehouse at
that moment are lost, and may only stay missing once a run acknowledged the loss.

Nothing here reads eosflow's ledger or positions: the expectations come from what was produced, and
the warehouse's rows (output table + eosflow.rejected) are compared against them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

VISIBLE = ("committed", "acknowledged")

Coord = tuple[int, int]  # (partition, offset) inside one topic incarnation


@dataclass(frozen=True)
class Rec:
    partition: int
    offset: int
    status: str  # committed | aborted | acknowledged
    kind: str  # "valid" or the poison kind (not_json, nul_in_key, ...)
    event_id: str | None  # the business key of a record whose value is a well-formed event
    step: int  # the step that produced it

    @property
    def visible(self) -> bool:
        return self.status in VISIBLE

    @property
    def valid(self) -> bool:
        return self.kind == "valid"


@dataclass(frozen=True)
class Rows:
    """What the warehouse holds for one pipeline: output and rejected rows by coordinates."""

    output: dict[tuple[str, int, int], list[str | None]]  # (topic, partition, offset) -> event ids
    rejected: dict[tuple[str, int, int], list[str]]  # -> errors

    def coords(self) -> set[tuple[str, int, int]]:
        return set(self.output) | set(self.rejected)


@dataclass
class PipelineModel:
    name: str
    topic: str
    table: str
    incarnation: int  # which creation of the topic name this pipeline reads
    records: dict[Coord, Rec] = field(default_factory=dict)
    floor: dict[int, int] = field(default_factory=dict)  # partition -> offsets below were deleted
    deletions: list[tuple[int, int, int]] = field(default_factory=list)  # (step, partition, below)
    lost_pending: set[Coord] = field(default_factory=set)  # deleted unread; no run acknowledged yet
    lost_acked: set[Coord] = field(default_factory=set)  # deleted unread; a run acknowledged the loss
    lost_maybe: set[Coord] = field(default_factory=set)  # deleted unread where a killed run may have begun
    settled_floor: dict[int, int] = field(default_factory=dict)  # floors a committed run planned past
    seen: set[tuple[str, int, int]] = field(default_factory=set)  # every row ever observed
    retired: bool = False  # its topic was re-created: every later run must be refused
    frozen: Rows | None = None  # a retired pipeline's rows, which must never change again
    ever_committed: bool = False

    # -- what the producer did ---------------------------------------------------------------------
    def add(self, rec: Rec) -> None:
        key = (rec.partition, rec.offset)
        if key in self.records:
            raise AssertionError(f"the producer reported offset {key} twice: {self.records[key]} and {rec}")
        self.records[key] = rec

    def delete_below(self, step: int, partition: int, below: int, present: set[tuple[str, int, int]]) -> int:
        """Retention deleted offsets below `below`; returns how many visible records it took unread."""
        self.deletions.append((step, partition, below))
        self.floor[partition] = max(self.floor.get(partition, 0), below)
        taken = {
            k
            for k, r in self.records.items()
            if r.visible
            and r.partition == partition
            and r.offset < below
            and (self.topic, partition, r.offset) not in present
            and k not in self.lost_acked
        }
        self.lost_pending |= taken
        return len(taken)

    def unsettled(self) -> set[int]:
        """Partitions whose log start moved since the last committed run planned past it."""
        return {p for p, f in self.floor.items() if f > self.settled_floor.get(p, 0)}

    def acknowledged(self) -> None:
        """A run that acknowledged data loss committed: every pending loss is now accepted."""
        self.lost_acked |= self.lost_pending
        self.lost_pending = set()

    def settle(self) -> None:
        """A committed normal run planned every partition from at or above its log start."""
        self.settled_floor = dict(self.floor)

    def visible_records(self) -> list[Rec]:
        return [r for r in self.records.values() if r.visible]

    def counts(self) -> Counter:
        return Counter((r.status, r.kind) for r in self.records.values())


def _produced(model: PipelineModel, t: str, p: int, o: int, where: str, bad: list[str]) -> Rec | None:
    """The visible record a warehouse row stands for; None (and the reason in `bad`) if there is none."""
    if t != model.topic:
        bad.append(f"{where}: not of the pipeline's topic {model.topic}")
        return None
    rec = model.records.get((p, o))
    if rec is None:
        bad.append(f"{where}: no record was produced at that offset (incarnation {model.incarnation})")
    elif not rec.visible:
        bad.append(f"{where}: the record is {rec.status} (step {rec.step}); it must never land")
        return None
    return rec


def compare(model: PipelineModel, rows: Rows, complete: bool) -> list[str]:
    """Every way the warehouse's rows differ from what the producer's side says they must be.

    complete: a quiescent point (a run that read everything committed since); then every visible
    record must be there too, except the ones retention deleted unread and a run acknowledged.
    """
    bad: list[str] = []
    topic = model.topic
    for (t, p, o), ids in rows.output.items():
        where = f"{model.table} row {t}[{p}]@{o}"
        if len(ids) > 1:
            bad.append(f"I1: {where} appears {len(ids)} times")
        rec = _produced(model, t, p, o, where, bad)
        if rec is None:
            continue
        if not rec.valid:
            bad.append(
                f"{where}: a poison record ({rec.kind}, step {rec.step}) is in the output, not rejected"
            )
        elif ids[0] != rec.event_id:
            bad.append(f"{where}: event id {ids[0]} but the producer wrote {rec.event_id}")
    for (t, p, o), errors in rows.rejected.items():
        where = f"rejected row {t}[{p}]@{o} ({errors[0]})"
        if len(errors) > 1:
            bad.append(f"I1: {where} appears {len(errors)} times")
        if (t, p, o) in rows.output:
            bad.append(f"I1: {where} is also in the output")
        rec = _produced(model, t, p, o, where, bad)
        if rec is not None and rec.valid:
            bad.append(f"{where}: a valid record (step {rec.step}) was rejected")
    ids = Counter(i for v in rows.output.values() for i in v)
    dup = sorted(i for i, n in ids.items() if n > 1 and i is not None)
    if dup:
        bad.append(f"I6: {len(dup)} event id(s) more than once in {model.table}, e.g. {dup[:3]}")
    present = rows.coords()
    vanished = sorted(model.seen - present)
    if vanished:
        bad.append(f"{len(vanished)} row(s) seen earlier are gone, e.g. {vanished[:5]}")
    gone = model.lost_pending | model.lost_acked | model.lost_maybe
    found_lost = sorted(k for k in gone if (topic, *k) in present)
    if found_lost:
        bad.append(f"records deleted before they were read are in the warehouse: {found_lost[:5]}")
    if complete:
        missing = sorted(
            (r.partition, r.offset)
            for r in model.visible_records()
            if (topic, r.partition, r.offset) not in present
            and (r.partition, r.offset) not in model.lost_acked
        )
        if missing:
            pending = [k for k in missing if k in model.lost_pending]
            detail = f" ({len(pending)} of them deleted unread, loss never acknowledged)" if pending else ""
            bad.append(
                f"{len(missing)} committed record(s) missing at a quiescent point{detail}, e.g. "
                + ", ".join(f"{topic}[{p}]@{o}" for p, o in missing[:5])
            )
    return bad
