"""The analyzer package has one direction of imports: no cycles inside it, none with the simulator.

The analyzers may import the simulator (``evaluate`` scores scenarios), never the other way round.

Every ``import`` counts, also those inside functions (a lazy import still ties two modules). The
core imports the detectors, the detectors import the features, nothing imports back.
"""

from __future__ import annotations

import ast
from pathlib import Path

import fleetscope

ROOT = Path(fleetscope.__file__).parent


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _graph(packages: tuple[str, ...]) -> dict[str, set[str]]:
    files = [p for pkg in packages for p in (ROOT / pkg).rglob("*.py")]
    mods = {_module(p): p for p in files}
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                if name in mods and name != mod:
                    graph[mod].add(name)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return [*stack[stack.index(n) :], n]
            if n not in state and (found := visit(n)):
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_no_import_cycles_in_the_analyzers():
    graph = _graph(("analyzers",))
    assert "fleetscope.analyzers.core" in graph and "fleetscope.analyzers.detectors.hang" in graph
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_simulator_does_not_import_the_analyzers():
    graph = _graph(("analyzers", "simulate"))
    into = {m: {n for n in deps if n.startswith("fleetscope.analyzers")} for m, deps in graph.items()
            if m.startswith("fleetscope.simulate")}  # fmt: skip
    assert not any(into.values()), into


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
