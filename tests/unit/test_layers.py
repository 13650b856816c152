"""The code's layers point one way: no import circles in `src/eosflow`, and the core never imports the
dev tools (the stack, the lab, the bench, the producer, the demo); the tools and the CLI import the core.

Read from the source with `ast`, function-local imports included: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
# Dev tools and what only they use; `eosflow.cli` offers them as subcommands, so it may import them.
TOOLS = ("eosflow.stack", "eosflow.lab", "eosflow.bench", "eosflow.produce", "eosflow.demo")
ENTRY_POINTS = ("eosflow.cli",)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in SRC.rglob("*.py")}


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def import_graph() -> dict[str, set[str]]:
    """Each eosflow module and the eosflow modules it imports (a package import is its __init__)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + [base])
                    base = base.rstrip(".")
                for a in node.names:  # `from pkg import module` imports the module
                    targets.add(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base)
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
    assert "eosflow.cli.main" in graph and "eosflow.stack" in graph["eosflow.cli.main"]  # a lazy import
    assert "eosflow.sinks.postgres.commit" in graph["eosflow.runners.job"]  # `from pkg import module`


def test_circles_are_found_when_there_are_some():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles_in_src():
    assert circles(import_graph()) == []


@pytest.mark.parametrize("tool", TOOLS)
def test_the_core_never_imports_a_dev_tool(tool):
    graph = import_graph()
    offenders = sorted(
        f"{m} imports {t}"
        for m, targets in graph.items()
        if not _within(m, TOOLS + ENTRY_POINTS)
        for t in targets
        if _within(t, (tool,))
    )
    assert offenders == []
