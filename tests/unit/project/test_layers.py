"""The code's layers point one way: no import circles in `src/eosflow`, between modules or between packages;
the layers docs/development/layout.md draws hold (the ledger below the sources, the sinks below the
declarations, verify and the runners, the Spark job's entry and then the CLI on top); the core never imports
the dev tools (the stack, the lab, the bench, the producer, the demo), which import the core; and nothing but
the CLI's sink-specific maintenance commands reaches into a sink's own package: runners, verify and the
Airflow glue ask the sink (eosflow.sinks.protocol).

Read from the source with `ast`, function-local imports included (a lazy import is still a dependency);
imports under `if TYPE_CHECKING:` are left out, as they never run. Imports made at run time are followed
too: `importlib.import_module` of a constant string, and the sink registry's built-in sinks (`_BUILT_IN`
in eosflow/sinks/registry.py, a module named in a string), which every pipeline declaration loads.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Collection
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SRC = ROOT / "src"
PLUGINS = ROOT / "plugins"
REGISTRY = SRC / "eosflow" / "sinks" / "registry.py"
LAYOUT = ROOT / "docs" / "development" / "layout.md"
DEV = ROOT / "dev" / "src"
# The dev tools: the distribution eosflow-dev (dev/), whose subcommands reach `eosflow` by entry point, so
# nothing of the product imports them, the CLI included.
TOOLS = ("eosflow_dev",)
ENTRY_POINTS = ("eosflow.cli",)
# The Spark job's entry: above the runners it runs, while the rest of eosflow.spark (the session, the
# workers' errors) is below them; `eosflow ingest` calls it, spark-submit runs task.py, which imports it; a
# warm Spark Connect server runs worker_daemon.py, which imports every sink's task modules.
JOB_ENTRY = ("eosflow.spark.job_main", "eosflow.spark.task", "eosflow.spark.worker_daemon")
# The ledger and the sources, the publisher's modules among them (eosflow.publish: one package for one
# feature, each module in the layer of the step it does).
LEDGER = ("eosflow.ledger", "eosflow.publish.position")
SOURCES = (
    "eosflow.sources",
    "eosflow.publish.outbox",
    "eosflow.publish.row_format",
    "eosflow.publish.offsets",
)
SINK_PACKAGES = ("eosflow.sinks.postgres", "eosflow.sinks.kafka", "eosflow.sinks.iceberg")
# Who may import a sink's own package: the sinks, the dev tools (the lab and the bench measure each
# sink), and the CLI (`eosflow partition` migrates a warehouse table).
SINK_IMPORTERS = ("eosflow.sinks",) + TOOLS + ENTRY_POINTS


def _module_name(path: Path, base: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    """eosflow's modules, the Airflow glue's and the dev tools'."""
    found = {_module_name(p, SRC): p for p in SRC.rglob("*.py")}
    found.update({_module_name(p, DEV): p for p in (DEV / "eosflow_dev").rglob("*.py")})
    found.update({_module_name(p, PLUGINS): p for p in (PLUGINS / "eosflow_airflow").rglob("*.py")})
    return found


def _runtime_nodes(tree: ast.AST):
    """Every node, except what sits under `if TYPE_CHECKING:`."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for child in node.orelse for n in [child, *_runtime_nodes(child)])
            continue
        yield node
        yield from _runtime_nodes(node)


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def imported(tree: ast.AST, package: str, modules: Collection[str]) -> set[str]:
    """The modules a module's syntax tree imports when it runs: import statements, and
    `importlib.import_module("a.constant.name")` (or `import_module(...)` imported by name)."""
    targets: set[str] = set()
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            targets.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + [base])
                base = base.rstrip(".")
            for a in node.names:  # `from pkg import module` imports the module
                targets.add(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base)
        elif (
            isinstance(node, ast.Call)
            and ast.unparse(node.func) in ("importlib.import_module", "import_module")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            targets.add(node.args[0].value)
    return targets


def registered_sinks() -> set[str]:
    """The modules of the sink registry's built-in sinks: `_BUILT_IN`'s values, "module:Class"."""
    tree = ast.parse(REGISTRY.read_text(), str(REGISTRY))
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(ast.unparse(t) == "_BUILT_IN" for t in node.targets):
            return {reference.partition(":")[0] for reference in ast.literal_eval(node.value).values()}
    raise AssertionError(f"no _BUILT_IN in {REGISTRY}: the layering no longer sees the registry's imports")


@cache  # read once per process: each test reads the same tree, and none changes the graph
def import_graph() -> dict[str, set[str]]:
    """Each eosflow module and the eosflow modules it imports (a package import is its __init__)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        targets = imported(ast.parse(path.read_text(), str(path)), package, modules)
        if name == "eosflow.sinks.registry":
            targets |= registered_sinks()  # importlib.import_module of a name read from _BUILT_IN
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_lazy_and_package_imports():
    graph = import_graph()
    assert "eosflow.observe.exporter" in graph["eosflow.cli.main"]  # a lazy import
    assert "eosflow.settings" in graph["eosflow_dev.stack.settings"]  # the dev tools are read too
    assert "eosflow.runners.job" in graph["eosflow.runners.backfill_run"]  # `from pkg import module`
    assert "eosflow.pipelines" not in graph["eosflow.sinks.protocol"]  # it names what it reads of one
    assert "eosflow.pipelines" in graph["eosflow_airflow.dags"]  # the Airflow glue is read too


def test_the_graph_follows_the_sink_registry_and_import_module():
    graph = import_graph()
    assert {
        "eosflow.sinks.postgres.sink",
        "eosflow.sinks.kafka.sink",
        "eosflow.sinks.iceberg.sink",
    } <= graph["eosflow.sinks.registry"]
    modules = {"eosflow.verify", "eosflow.sinks", "eosflow.sinks.kafka"}
    tree = ast.parse(
        "import importlib\n"
        "from importlib import import_module\n"
        "def f(name):\n"
        "    importlib.import_module('eosflow.verify')\n"
        "    import_module('eosflow.sinks.kafka')\n"
        "    importlib.import_module(name)\n"  # not a constant: nothing to follow
    )
    assert imported(tree, "eosflow", modules) >= {"eosflow.verify", "eosflow.sinks.kafka"}
    assert "name" not in imported(tree, "eosflow", modules)


def test_circles_are_found_when_there_are_some():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles_in_src():
    assert circles(import_graph()) == []


def test_the_ledger_never_imports_a_source():
    """The ledger sits below the sources, as Spark's Kafka source is built: its KafkaOffsetRangeCalculator
    turns offsets into immutable ranges, and each task is handed the range it reads. So the ledger holds the
    values (a range, a plan, a publisher's Position), the pure planner and what the warehouse stores of
    them; a source asks Kafka or an outbox what there is and reads the range it is given, importing those
    values. A ledger that read a source back (the publisher's offsets topic once did) would point the
    arrow both ways: what reads Kafka is a source's (eosflow.publish.offsets). The publisher's package
    keeps the same rule: its position is the ledger's, its outbox, row format and offsets are sources."""
    graph = import_graph()
    offenders = sorted(
        f"{m} imports {t}"
        for m, targets in graph.items()
        if _within(m, LEDGER)
        for t in targets
        if _within(t, SOURCES)
    )
    assert offenders == []
    assert "eosflow.ledger.ranges" in graph["eosflow.sources.kafka.read"]  # the other way is the way


def test_the_sinks_never_import_a_declaration_verify_or_a_runner():
    """A sink is asked, through eosflow.sinks.protocol: a declaration (eosflow.pipelines) loads the sinks
    through the registry, verify asks them for their verdict, and a runner hands them its read as a
    callable (Run.read). A sink that imported any of them back would close a circle at run time; it types
    a pipeline against the protocol's Pipeline, and takes what it shares with them from below
    (eosflow.errors, eosflow.declaration_numbers, eosflow.dbt_build)."""
    graph = import_graph()
    above = ("eosflow.pipelines", "eosflow.publish", "eosflow.verify", "eosflow.runners", "eosflow.cli")
    offenders = sorted(
        f"{m} imports {t}"
        for m, targets in graph.items()
        if _within(m, ("eosflow.sinks",))
        for t in targets
        if _within(t, above)
    )
    assert offenders == []


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """eosflow's packages and top-level modules (eosflow.sinks, eosflow.pipelines, ...) and which others each
    imports; the Spark job's entry is a node of its own (JOB_ENTRY)."""

    def node(module: str) -> str:
        return module if _within(module, JOB_ENTRY) else ".".join(module.split(".")[:2])

    packages: dict[str, set[str]] = {}
    for m, targets in graph.items():
        if _within(m, ("eosflow",)):
            packages.setdefault(node(m), set()).update(
                node(t) for t in targets if _within(t, ("eosflow",)) and node(t) != node(m)
            )
    return packages


def test_no_import_circles_between_packages():
    """Imports point one way between eosflow's packages, not only between its modules: a package that
    imports another, which imports it back through other modules (the ledger and the sources, the sinks
    and verify once did), is one layer in two places, and the next import closes a circle."""
    assert circles(package_graph(import_graph())) == []


def test_the_spark_job_enters_through_eosflow_spark_and_the_cli_is_imported_by_none():
    """The job's arguments and exit codes are eosflow.spark.job_main's: spark-submit runs task.py, which
    imports it, and `eosflow ingest` calls it. The CLI is the top: nothing imports it, the Spark job's
    entry least of all (it once entered through eosflow.cli.ingest)."""
    graph = import_graph()
    offenders = sorted(
        f"{m} imports {t}"
        for m, targets in graph.items()
        if not _within(m, ENTRY_POINTS)
        for t in targets
        if _within(t, ENTRY_POINTS)
    )
    assert offenders == []
    assert graph["eosflow.spark.task"] == {"eosflow.spark.job_main"}
    assert "eosflow.spark.job_main" in graph["eosflow.cli.main"]


def _layer_module(name: str) -> str:
    """`ledger/planner` -> eosflow.ledger.planner (under src/eosflow/); `publish/__init__` -> eosflow.publish;
    `dev/src/eosflow_dev`: eosflow_dev."""
    if name.startswith("dev/src/"):
        return name.removeprefix("dev/src/").replace("/", ".")
    return "eosflow." + name.removesuffix("/__init__").replace("/", ".")


def layout_layers() -> list[tuple[str, ...]]:
    """The layers of docs/development/layout.md's "Layers" table, first to last: each row's first cell names
    its modules (`name.py`) and packages (`name/`) under src/eosflow, or the dev tools'
    `dev/src/eosflow_dev/`."""
    text = LAYOUT.read_text()
    section = text[text.index("## Layers") :].split("\n## ", 1)[0]
    layers = []
    for line in section.splitlines():
        if line.startswith("| ") and not line.startswith("| layer"):
            cell = line.split(" | ")[0]
            names = re.findall(r"`([^`]+)`", cell)
            layers.append(
                tuple(
                    _layer_module(n.removesuffix(".py").removesuffix("/"))
                    for n in names
                    if n.endswith((".py", "/"))
                )
            )
    return layers


def test_the_layers_in_layout_md_hold():
    """The map in docs/development/layout.md is the code's: every eosflow module is in a layer (the most
    specific name that covers it), and imports only its own layer's modules or an earlier layer's."""
    layers = layout_layers()

    def layer(module: str) -> tuple[int, str] | None:
        found = [
            (len(name), i, name)
            for i, names in enumerate(layers)
            for name in names
            if _within(module, (name,))
        ]
        return max(found)[1:] if found else None

    graph = import_graph()
    placed = {m: layer(m) for m in graph if _within(m, ("eosflow",)) and m != "eosflow"}  # not the package
    assert sorted(m for m, at in placed.items() if at is None) == [], "place these in layout.md's Layers"
    later = sorted(
        f"{m} imports {t}, of a later layer ({at[1]})"
        for m, here in placed.items()
        for t in graph[m]
        if here and (at := placed.get(t)) and at[0] > here[0]
    )
    assert later == []


def test_only_the_sinks_tools_and_cli_reach_into_a_sink():
    graph = import_graph()
    offenders = sorted(
        f"{m} imports {t}"
        for m, targets in graph.items()
        if not _within(m, SINK_IMPORTERS)
        for t in targets
        if _within(t, SINK_PACKAGES)
    )
    assert offenders == []


@pytest.mark.parametrize("tool", TOOLS)
def test_the_core_never_imports_a_dev_tool(tool):
    graph = import_graph()
    offenders = sorted(
        f"{m} imports {t}"
        for m, targets in graph.items()
        if not _within(m, TOOLS)
        for t in targets
        if _within(t, (tool,))
    )
    assert offenders == []
