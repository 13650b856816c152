"""The lab's report: one Markdown table (a row per scenario x producer x mode) and a CSV per trial."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from eosflow_dev.lab.outcome import Trial

HEAD = ("scenario", "producer", "consumer mode", "trials", "produced", "acknowledged", "committed",
        "lost", "duplicated", "replica missing/stale/extra", "dbt invariants", "faults")  # fmt: skip
REPLICA = HEAD.index("replica missing/stale/extra")


def rows(trials: Sequence[Trial]) -> list[tuple]:
    """Trials of the same scenario, producer and mode summed; in the order they ran."""
    groups: dict[tuple[str, str, str], list[Trial]] = {}
    for t in trials:
        groups.setdefault((t.scenario, t.producer, t.mode), []).append(t)
    out = []
    for (scenario, producer, mode), ts in groups.items():
        verdicts = sorted({t.invariants for t in ts})
        out.append(
            (
                scenario,
                producer,
                mode,
                len(ts),
                sum(t.produced for t in ts),
                sum(t.acknowledged for t in ts),
                sum(t.committed for t in ts),
                sum(t.lost for t in ts),
                sum(t.duplicated for t in ts),
                replica(ts),
                "; ".join(verdicts),
                sum(t.faults for t in ts),
            )
        )
    return out


def replica(trials: Sequence[Trial]) -> str:
    """A change stream's state table against its source, summed over the trials; n/a without a replica."""
    counts = [t.replica for t in trials if t.replica is not None]
    if not counts:
        return "n/a"
    return "/".join(str(sum(c[i] for c in counts)) for i in range(3))


def markdown_table(trials: Sequence[Trial]) -> str:
    lines = ["| " + " | ".join(HEAD) + " |", "|" + "|".join("---" for _ in HEAD) + "|"]
    for row in rows(trials):
        cells = [f"{v:,}" if isinstance(v, int) else str(v) for v in row]
        lost, dup = row[7], row[8]
        cells[7] = f"**{lost:,}**" if lost else "0"
        cells[8] = f"**{dup:,}**" if dup else "0"
        if row[REPLICA] not in ("n/a", "0/0/0"):
            cells[REPLICA] = f"**{row[REPLICA]}**"
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def text_table(trials: Sequence[Trial]) -> str:
    """The same table for a terminal or a task log."""
    data = [HEAD, *(tuple(f"{v:,}" if isinstance(v, int) else str(v) for v in r) for r in rows(trials))]
    widths = [max(len(r[i]) for r in data) for i in range(len(HEAD))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in data)


def write(trials: Sequence[Trial], out_dir: Path, header: str) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    md, table_csv = out_dir / "latest.md", out_dir / "latest.csv"
    details = "\n".join(
        f"- {t.scenario} / {t.producer} / {t.mode} / trial {t.trial}: {t.fault_detail}" for t in trials
    )
    md.write_text(
        f"{header}\n\n{markdown_table(trials)}\n\n"
        "Lost: acknowledged records absent from the output (the warehouse table; for the kafka_ modes, "
        "the output topic as a read_committed consumer reads it). Duplicated: output rows or records beyond "
        "one per event. Both are counted against the producer's manifest, never eosflow's ledger. "
        "For the changes_ modes (a Debezium change stream into a changelog and a state table) a record is a "
        "change, its id its LSN (tombstones not counted), and lost and duplicated are the changelog's; "
        "replica missing/stale/extra compares the state table with the source table the committed changes "
        "leave: keys live in the source and absent, present with a column that differs, present though "
        "deleted (n/a: no replica). Faults: injected and observed to have happened.\n\n"
        f"## What happened, trial by trial\n\n{details}\n"
    )
    with table_csv.open("w", newline="") as fh:
        out = csv.DictWriter(fh, fieldnames=Trial.columns())
        out.writeheader()
        out.writerows(asdict(t) for t in trials)
    return md, table_csv


README_START, README_END = "<!-- eosflow-lab:latest:start -->", "<!-- eosflow-lab:latest:end -->"


def update_readme(readme: Path, trials: Sequence[Trial], header_line: str) -> bool:
    """Put the latest table between the README's markers; False when the README has none."""
    text = readme.read_text() if readme.exists() else ""
    if README_START not in text or README_END not in text:
        return False
    head, rest = text.split(README_START, 1)
    _, tail = rest.split(README_END, 1)
    body = f"{header_line}\n\n{markdown_table(trials)}\n"
    readme.write_text(f"{head}{README_START}\n{body}{README_END}{tail}")
    return True
