"""The docs site cannot drift from the code: the reference pages are what docs/_gen/reference.py writes
now, they list exactly the flags, variables, exit codes, keys and metrics the code defines, and the
troubleshooting page has an entry for every error class eosflow defines."""

from __future__ import annotations

import argparse
import ast
import builtins
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs"
REGENERATE = "run `.venv/bin/python docs/_gen/reference.py` and commit docs/reference/"


@pytest.fixture(scope="module")
def generator():
    spec = importlib.util.spec_from_file_location("docs_reference", DOCS / "_gen" / "reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rows(page: str) -> list[tuple[str, str]]:
    """(the `## ` heading above it, its first cell) for every table row of a reference page."""
    heading, found = "", []
    for line in (DOCS / "reference" / page).read_text().splitlines():
        if line.startswith("## "):
            heading = line[3:].strip()
        elif line.startswith("| ") and not line.startswith("|---"):
            found.append((heading, line.split(" | ")[0].removeprefix("| ")))
    return found


def names(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def test_the_committed_reference_pages_are_what_the_generator_writes(generator, tmp_path):
    stale = [
        path.name
        for path in generator.write(tmp_path)
        if not (DOCS / "reference" / path.name).exists()
        or path.read_text() != (DOCS / "reference" / path.name).read_text()
    ]
    assert not stale, f"docs/reference/{stale} no longer match the code: {REGENERATE}"


def test_the_cli_page_lists_every_argument_of_every_command():
    from eosflow.cli.main import build_parser

    def walk(parser: argparse.ArgumentParser, path: str):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from walk(sub, f"{path} {name}")
            elif not isinstance(action, argparse._HelpAction):
                yield from ((path, n) for n in action.option_strings or [action.dest])

    in_code = set(walk(build_parser(), "eosflow"))
    documented = {(heading, n) for heading, cell in rows("cli.md") if heading for n in names(cell)}
    assert documented == in_code, REGENERATE


def test_the_environment_page_lists_every_variable_the_code_reads(generator):
    documented = {n for heading, cell in rows("environment.md") for n in names(cell)}
    assert documented == set(generator.environment_reads()), REGENERATE
    # A cross-check that does not depend on the generator's ast walk: the plain calls, found by text.
    call = re.compile(r"""(?:environ\.get|getenv|_int|_json_object)\(\s*["'](EOSFLOW_\w+)["']""")
    seen = {
        name
        for folder in generator.SOURCES
        for path in (ROOT / folder).rglob("*.py")
        for name in call.findall(path.read_text())
    }
    assert seen - documented == set(), REGENERATE


def test_the_exit_code_page_lists_every_error_the_runs_map():
    from eosflow.runners.outcomes import EXIT

    documented = set()
    for line in (DOCS / "reference" / "exit-codes.md").read_text().splitlines():
        if found := re.match(r"^\| (\d+) \| [A-Z ]+ \| \[(\w+)\]", line):
            documented.add((int(found[1]), found[2]))
    assert documented == {(code, kind.__name__) for kind, code in EXIT.items()}, REGENERATE


def test_the_pipelines_page_lists_every_key_the_parsers_take(generator):
    from eosflow import pipelines
    from eosflow.databases import declaration as databases
    from eosflow.schema import declaration
    from eosflow.sinks import registry

    in_code = {
        "Every pipeline": set(pipelines._PIPELINE_KEYS),
        "A database entry (`database:`)": set(databases._ENTRY_KEYS),
        "Each column (`columns:`)": set(declaration._COLUMN_KEYS),
        "Publishers (`publishers:`)": set(generator.publisher_keys()),
        **{f"`sink: {kind}`": set(registry.sink_class(kind).keys) for kind in registry._BUILT_IN},
    }
    documented: dict[str, set[str]] = {}
    for heading, cell in rows("pipelines.md"):
        documented.setdefault(heading, set()).update(names(cell))
    assert documented == in_code, REGENERATE


def test_the_metrics_page_lists_every_metric():
    source = (ROOT / "src" / "eosflow" / "observe" / "metrics.py").read_text()
    families = re.findall(r'(Gauge|Counter)MetricFamily\(\s*"(eosflow_\w+)"', source)
    in_code = {name + ("_total" if kind == "Counter" else "") for kind, name in families}
    assert {n for _, cell in rows("metrics.md") for n in names(cell)} == in_code, REGENERATE


# Exception classes that never reach a user: each is caught inside the module that raises it.
INTERNAL = {
    "_TooDeep": "schema.compiled: sends a deeply nested record to the Python check, which gives the verdict",
    "_Unconvertible": "schema.protobuf: becomes a rejected row's `not Protobuf: ...` reason",
    "_Stop": "stack.airflow_local: SIGTERM or SIGHUP turned into Ctrl-C's path",
    "SchemaBlockError": "databases.discover: a table discovery refuses; its reason is the table's line",
}


def exception_classes() -> dict[str, str]:
    """{class name: module path} of every subclass of an exception eosflow defines: the product's
    (src/eosflow) and the dev tools' (dev/src/eosflow_dev), whose commands users run too."""
    bases: dict[str, tuple[str, list[str]]] = {}
    packages = (ROOT / "src" / "eosflow", ROOT / "dev" / "src" / "eosflow_dev")
    for path in sorted(p for package in packages for p in package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                parents = [ast.unparse(b).split(".")[-1] for b in node.bases]
                bases[node.name] = (str(path.relative_to(ROOT)), parents)
    builtin = {n for n in dir(builtins) if isinstance(getattr(builtins, n), type)}
    errors = {n for n in builtin if issubclass(getattr(builtins, n), BaseException)}
    found: dict[str, str] = {}
    while True:
        more = {
            name: where
            for name, (where, parents) in bases.items()
            if name not in found and any(p in errors or p in found for p in parents)
        }
        if not more:
            return found
        found.update(more)


def test_every_error_class_has_a_troubleshooting_entry():
    page = (DOCS / "troubleshooting.md").read_text()
    entries = set(re.findall(r"^### (_?[A-Z][a-z]\w*)$", page, flags=re.MULTILINE))
    classes = exception_classes()
    missing = sorted(
        f"{name} ({where})" for name, where in classes.items() if name not in entries | set(INTERNAL)
    )
    assert not missing, f"docs/troubleshooting.md has no `### <ClassName>` entry for {missing}"
    assert entries - set(classes) == set(), "docs/troubleshooting.md has entries for classes that are gone"
    assert set(INTERNAL) <= set(classes), "INTERNAL names a class that is gone"


def test_the_dags_page_names_every_param_of_the_dags():
    source = (ROOT / "plugins" / "eosflow_airflow" / "dags.py").read_text()
    params = set(re.findall(r'"(\w+)": Param\(', source))
    documented = set(
        re.findall(r"^\| `(\w+)` \|", (DOCS / "reference" / "dags.md").read_text(), re.MULTILINE)
    )
    assert params and params <= documented, f"docs/reference/dags.md lacks the params {params - documented}"


def test_every_outcome_line_names_a_troubleshooting_entry_that_exists():
    """The runners print `OUTCOME: message (cause and fix: <entry>)`: the entry's anchor must exist."""
    from eosflow.runners.outcomes import EXIT, TROUBLESHOOTING, reported

    page = (ROOT / TROUBLESHOOTING).read_text()
    anchors = {line[4:].strip().lower() for line in page.splitlines() if line.startswith("### ")}
    for kind in EXIT:
        code, line = reported(kind.__new__(kind))
        assert code == EXIT[kind]
        assert line.endswith(f" (cause and fix: {TROUBLESHOOTING}#{kind.__name__.lower()})"), line
        assert kind.__name__.lower() in anchors, f"{kind.__name__}: no ### entry in {TROUBLESHOOTING}"


def test_an_ingest_that_fails_prints_its_outcome_then_its_entry(monkeypatch, capsys):
    import argparse

    from eosflow.ledger.positions import FencedError
    from eosflow.runners import database, job
    from eosflow.spark import job_main as ingest

    def fenced(*args, **kwargs):
        raise FencedError("batch b: another run committed orders[0] first")

    monkeypatch.setattr(job, "run", fenced)
    monkeypatch.setattr(database, "database_entry", lambda settings, name: None)  # a pipeline, not a database
    args = argparse.Namespace(
        pipeline="orders", run_id=None, max_records=None, acknowledge_data_loss=False, range=None, mode=None
    )
    assert ingest.execute(args, settings=object()) == 3
    assert capsys.readouterr().err.splitlines() == [
        "eosflow ingest: FENCED: batch b: another run committed orders[0] first "
        "(cause and fix: docs/troubleshooting.md#fencederror)"
    ]


def test_a_command_that_refuses_names_the_errors_entry(capsys):
    from eosflow.cli.main import main

    assert main(["verify", "--pipeline", "no_such_pipeline"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("eosflow: error: unknown pipeline 'no_such_pipeline'")
    assert err.rstrip().endswith("(cause and fix: docs/troubleshooting.md#pipelineconfigerror)")
