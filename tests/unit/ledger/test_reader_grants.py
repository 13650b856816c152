"""The read-only role's grants are written twice: in the migration (a warehouse whose reader exists when it
runs) and in docs/readonly-role.sql (an administrator's, for a reader made afterwards). They must agree, and
neither may give the reader a rejected record's raw payload, a blanket SELECT or pg_read_all_stats."""

from __future__ import annotations

import re
from pathlib import Path

from eosflow.ledger.migrate import MIGRATIONS

ROOT = Path(__file__).resolve().parents[3]
MIGRATION = MIGRATIONS / "012_reader_reads_what_the_view_shows.sql"
# Later migrations grant what they add (013: a database entry's members, by name and topic).
LATER = sorted(p for p in MIGRATIONS.glob("*.sql") if p.name > MIGRATION.name)


def grants(text: str) -> set[str]:
    """Each `grant ... to eosflow_reader` statement on eosflow's objects (not the database's CONNECT, which
    the stack or an administrator gives), one line, lower case, without comments."""
    code = re.sub(r"--[^\n]*", "", text).lower()
    found = re.findall(r"\bgrant\b[^;]*?\bto eosflow_reader\b", code, flags=re.S)
    return {" ".join(g.split()) for g in found if "on database" not in g}


def test_the_migration_and_the_administrators_script_grant_the_reader_the_same():
    granted = grants(MIGRATION.read_text()).union(*(grants(p.read_text()) for p in LATER))
    assert granted == grants((ROOT / "docs" / "readonly-role.sql").read_text())


def test_the_reader_gets_no_raw_payload_no_blanket_select_and_no_statistics():
    found = grants(MIGRATION.read_text())
    assert found, "the migration grants the reader something"
    assert not any("raw_" in g or "all tables" in g or "pg_read_all_stats" in g for g in found), found
    (rejected,) = [g for g in found if "eosflow.rejected" in g]
    assert rejected.startswith("grant select (") and "error" in rejected and "kafka_offset" in rejected
    script = re.sub(r"--[^\n]*", "", (ROOT / "docs" / "readonly-role.sql").read_text()).lower()
    assert "grant pg_read_all_stats to eosflow;" in script and "default privileges" not in script
