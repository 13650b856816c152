"""`pip install` of eosflow gives everything it reads at run time, with no checkout beside it: the DAG
factories and hooks (eosflow_airflow), the Spark entry script, the dbt project, the migrations, and the
example transform's entry point. Built as a wheel and imported from a folder of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.install.wheel import build_wheel

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("built"), tmp_path_factory.mktemp("source"))


def test_the_wheel_carries_what_eosflow_reads_at_run_time(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {
        "eosflow/spark/task.py",
        "eosflow/spark/jars.lock",  # what `eosflow jars fetch` downloads and every Spark start checks
        "eosflow/observe/EosflowRunFacet.json",  # the schema an OpenLineage event's eosflow_run facet names
        "eosflow/dbt_project/dbt_project.yml",
        "eosflow/dbt_project/profiles.yml",
        "eosflow/dbt_project/models/staging/stg_output.sql",
        "eosflow/dbt_project/tests/generic/no_duplicate_business_keys.sql",
        "eosflow_airflow/dags.py",
        "eosflow_airflow/hooks/eosflow.py",
        "eosflow_airflow/bundle.py",  # the DAG bundle, and the DAG files it serves
        "eosflow_airflow/dag_files/eosflow_ingest.py",
        "eosflow_airflow/dag_files/eosflow_config_errors.py",
        "eosflow_airflow/hooks/connection_types.py",
        "eosflow_airflow/get_provider_info.py",
        "eosflow/examples/pipe_clicks.py",
    }
    assert expected <= names, sorted(expected - names)
    migrations = sorted(p.name for p in (ROOT / "src/eosflow/ledger/migrations").glob("*.sql"))
    assert {f"eosflow/ledger/migrations/{m}" for m in migrations} <= names
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert (
        "pipe_clicks = eosflow.examples.pipe_clicks:parse"
        in zipfile.ZipFile(wheel).read(entry_points).decode()
    )


def test_the_wheel_is_the_product_only_and_the_dev_tools_a_distribution_of_their_own(wheel):
    """`pip install eosflow` brings neither the local stack, the lab, the bench, the producer nor the demo,
    nor what only they need (matplotlib); eosflow-dev (dev/) holds them and adds their subcommands."""
    archive = zipfile.ZipFile(wheel)
    packages = {name.split("/", 1)[0] for name in archive.namelist() if "/" in name}
    assert {p for p in packages if not p.endswith(".dist-info")} == {"eosflow", "eosflow_airflow"}
    tools = ("stack", "lab", "bench", "produce", "demo")
    assert [n for n in archive.namelist() if n.split("/")[:2] in (["eosflow", t] for t in tools)] == []
    metadata = archive.read(next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA")))
    requires = [line for line in metadata.decode().splitlines() if line.startswith("Requires-Dist:")]
    assert requires and not [r for r in requires if "matplotlib" in r]
    dev = (ROOT / "dev" / "pyproject.toml").read_text()
    assert 'dev = "eosflow_dev.commands:register"' in dev  # the subcommands' entry point


def test_the_dev_tools_subcommands_come_by_entry_point_and_the_product_lists_its_own_without_them():
    from eosflow.cli import main as cli

    product = {"ingest", "stream", "backfill", "discover", "verify", "publish", "kafka", "compact"}
    found = set(cli.build_parser()._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    assert product | {"stack", "lab", "bench", "demo", "produce"} <= found  # eosflow-dev is installed here
    source = (ROOT / "src" / "eosflow" / "cli" / "main.py").read_text()
    assert "eosflow_dev" not in source  # only by the entry point


def test_an_installed_eosflow_finds_all_of_it_without_the_checkout(wheel, tmp_path):
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    probe = """
import json, sys
from eosflow import dbt_build, settings
from eosflow.spark import jars, submit
from eosflow.ledger import migrate
import eosflow_airflow.dags, eosflow_airflow.hooks.eosflow
print(json.dumps({
    "eosflow": __import__("eosflow").__file__,
    "dbt": str(dbt_build.DBT_PROJECT), "dbt_ok": (dbt_build.DBT_PROJECT / "dbt_project.yml").exists(),
    "entry": str(submit.SPARK_ENTRY), "entry_ok": submit.SPARK_ENTRY.exists(),
    "migrations": len(list(migrate.MIGRATIONS.glob("*.sql"))),
    "root": str(settings.load().root),
    "jars_dir": str(settings.load().jars_dir), "prefix": sys.prefix, "locked": len(jars.locked()),
    "dags": eosflow_airflow.dags.__file__,
}))
"""
    env = {k: v for k, v in os.environ.items() if k not in ("EOSFLOW_HOME", "PYTHONPATH")}
    env["PYTHONPATH"] = str(site)  # ahead of the venv's editable install of the checkout
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    for key in ("eosflow", "dbt", "entry", "dags"):
        assert found[key].startswith(str(site)), (key, found[key])  # never the checkout's copy
    assert found["dbt_ok"] and found["entry_ok"] and found["migrations"] >= 5
    assert found["root"] == str(tmp_path.resolve())  # pipelines.yml and state: where it runs
    # Spark's jars: a folder of the environment eosflow is installed in, not of the working directory
    assert found["jars_dir"] == str(Path(found["prefix"], "share", "eosflow", "jars").resolve())
    assert found["locked"] >= 10
