"""eosflow as Airflow finds it once installed: the provider (`airflow providers list`), its two connection
types, and the view as one plugin, by entry points, with no plugins folder (docs/DESIGN.md, "In a team's own
Airflow"). Airflow's own CLI answers, in the project's Airflow environment."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from eosflow_dev.stack import airflow_local
from eosflow_dev.stack import settings as settings_mod

AIRFLOW = str(Path(sys.executable).parent / "airflow")


def _airflow(*args: str, tmp_path: Path) -> str:
    env = airflow_local.airflow_env(settings_mod.load()) | {"AIRFLOW_HOME": str(tmp_path / "home")}
    done = subprocess.run(
        [AIRFLOW, *args, "-o", "json"], env=env, capture_output=True, text=True, timeout=180, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout[done.stdout.index("[") :]  # after any warning Airflow prints first


def test_airflow_lists_eosflow_as_a_provider_with_its_two_connection_types(tmp_path) -> None:
    providers = {p["package_name"]: p for p in json.loads(_airflow("providers", "list", tmp_path=tmp_path))}
    assert "eosflow" in providers, sorted(providers)
    from importlib.metadata import version

    assert providers["eosflow"]["version"] == version("eosflow")
    hooks = {h["connection_type"]: h for h in json.loads(_airflow("providers", "hooks", tmp_path=tmp_path))}
    types = "eosflow_airflow.hooks.connection_types"
    assert hooks["eosflow_schema_registry"]["class"] == f"{types}.SchemaRegistryHook"
    assert hooks["eosflow_iceberg"]["class"] == f"{types}.IcebergCatalogHook"
    assert hooks["eosflow_iceberg"]["package_name"] == "eosflow"


def test_the_view_is_one_plugin_found_by_its_entry_point_not_the_plugins_folder(tmp_path) -> None:
    plugins = json.loads(_airflow("plugins", tmp_path=tmp_path))
    eosflow = [p for p in plugins if p["name"] == "eosflow"]
    assert len(eosflow) == 1, plugins  # once: the plugins folder does not hold it too
    assert eosflow[0]["source"].startswith("eosflow=="), eosflow[0]["source"]  # the entry point
    assert eosflow[0]["fastapi_apps"] and eosflow[0]["external_views"]
    folder = Path(airflow_local.airflow_env(settings_mod.load())["AIRFLOW__CORE__PLUGINS_FOLDER"])
    assert not (folder / "eosflow_airflow").exists()


def test_airflow_lists_eosflows_hooks_operators_triggers_and_notifier_as_a_provider_declares_them(tmp_path):
    """Laid out as Airflow's providers are (hooks/, operators/, triggers/, notifications/), and declared so:
    every module and class the provider info names imports, and Airflow's CLI lists the trigger (about 30 s:
    two runs of Airflow's CLI)."""
    import importlib

    [info] = json.loads(_airflow("providers", "get", "eosflow", "--full", tmp_path=tmp_path))
    modules = {
        kind: [m for entry in info[kind] for m in entry["python-modules"]]
        for kind in ("hooks", "operators", "triggers")
    }
    assert modules == {
        "hooks": [
            "eosflow_airflow.hooks.eosflow",
            "eosflow_airflow.hooks.connection_types",
            "eosflow_airflow.hooks.spark_submit",
        ],
        "operators": ["eosflow_airflow.operators.tasks", "eosflow_airflow.operators.spark"],
        "triggers": ["eosflow_airflow.triggers.wake"],
    }
    for module in (m for listed in modules.values() for m in listed):
        importlib.import_module(module)
    triggers = json.loads(_airflow("providers", "triggers", tmp_path=tmp_path))
    assert {
        "package_name": "eosflow",
        "class": "eosflow_airflow.triggers.wake",
        "integration_name": "eosflow",
    } in triggers
    assert info["notifications"] == ["eosflow_airflow.notifications.alerts.FailureAlert"]
    module, _, name = "eosflow_airflow.notifications.alerts.FailureAlert".rpartition(".")
    assert getattr(importlib.import_module(module), name).__name__ == name
