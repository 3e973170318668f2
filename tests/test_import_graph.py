"""The whole package imports one way: no import cycle anywhere, and layers that only look down.

Layers, lowest first (a module may import its own package and any lower layer; a higher one never):

0. base: the top-level modules (``contract``, ``errors``, ``times``, ``argtypes``, ...), and
   ``hang/`` (parsers and reasoning over dump and RAS files, standard library only: the node agent
   reuses its RAS parser; its join to series lives in ``analyzers/hang_join``);
1. the window layer (``window/``) and, beside it and apart from each other, the node agent
   (``exporters/``, ``telemetry/``) and the rules (``alerts/``);
2. the simulator (``simulate/``), which drives the real training library and the exporter's
   training collector (one semantics: no second copy of their counter rules);
3. the analyzers (``analyzers/``, whose ``evaluate`` scores them on simulated scenarios) and the
   dashboards (``dashboards/``, which read the rules' names);
4. the service (``service/``);
5. the demo (``demo/``);
6. the command-line modules: ``fleetscope.cli``, ``__main__``, ``generate`` and every ``cli`` or
   ``*_cli`` module, which may import each other.

Inside the analyzers, signals compute and detectors decide: a detector module imports no other
detector (only the registry, ``detectors/__init__.py``, imports them), the signal layer
(``analyzers/signals/``) imports no detector, and ``features`` (what the signals are computed from)
imports nothing from the signal layer. The per-job signals (``signals/jobs.py``, ``signals/mfu.py``)
are read through their cached members of ``Signals`` alone: only the signal layer imports them.

A name that starts with one underscore is its module's own: no other module imports it (``from m
import _name``) or reads it off an imported module (``m._name``). What two modules share is public
API, named so.

What counts as an edge. Every ``import``, also one inside a function: a lazy import still ties two
modules, and a loop through one is a loop as soon as both run. Two kinds do not count, because they
never make one module run another: imports under ``if TYPE_CHECKING:`` (annotations only), and the
parent package that Python imports before a submodule (``from fleetscope.telemetry import writer``
is an edge to ``fleetscope.telemetry.writer``, not to ``fleetscope.telemetry``; ``from pkg import
name`` of a name that is not a module is an edge to ``pkg``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import fleetscope

ROOT = Path(fleetscope.__file__).parent

#: Layer of each top-level package (module-level files are base, CLI modules the top).
LAYERS: dict[str, int] = {
    "hang": 0,
    "window": 1, "exporters": 1, "telemetry": 1, "alerts": 1,
    "simulate": 2,
    "analyzers": 3, "dashboards": 3,
    "service": 4,
    "demo": 5,
}  # fmt: skip
CLI_LAYER = 6
CLI_MODULES = ("fleetscope.cli", "fleetscope.__main__", "fleetscope.generate")


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the import nodes inside ``if TYPE_CHECKING:`` blocks."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test).rpartition(".")[2] == "TYPE_CHECKING":
            out |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return out


def _imports(mod: str, path: Path, mods: set[str]) -> set[str]:
    """The package modules ``mod`` imports (module docstring: what counts)."""
    tree = ast.parse(path.read_text())
    skip = _type_checking_nodes(tree)
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.add(sub if sub in mods else base)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return {m for m in out if m in mods and m != mod}


def _graph() -> dict[str, set[str]]:
    mods = {_module(p): p for p in ROOT.rglob("*.py")}
    return {mod: _imports(mod, path, set(mods)) for mod, path in mods.items()}


def _layer(mod: str) -> tuple[int, str]:
    """(layer, package) of a module."""
    parts = mod.split(".")
    if mod in CLI_MODULES or parts[-1] == "cli" or parts[-1].endswith("_cli"):
        return CLI_LAYER, "cli"
    if len(parts) == 1 or (ROOT / f"{parts[1]}.py").exists():
        return 0, "base"
    return LAYERS[parts[1]], parts[1]


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


def _upward(graph: dict[str, set[str]]) -> list[str]:
    """Imports that look up, or sideways into another package of the same layer (not between CLIs)."""
    bad = []
    for mod, deps in graph.items():
        layer, package = _layer(mod)
        for dep in deps:
            dep_layer, dep_package = _layer(dep)
            sideways = dep_layer == layer and dep_package != package and layer not in (0, CLI_LAYER)
            if dep_layer > layer or sideways:
                bad.append(f"{mod} (layer {layer}) -> {dep} (layer {dep_layer})")
    return sorted(bad)


def test_the_whole_package_has_no_import_cycle() -> None:
    graph = _graph()
    assert {
        "fleetscope.window.sources",
        "fleetscope.analyzers.core",
        "fleetscope.service.app",
        "fleetscope.simulate.model",
        "fleetscope.telemetry.monitor",
    } <= set(graph)
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_imports_look_down_the_layers() -> None:
    graph = _graph()
    assert {_layer(m)[1] for m in graph} - {"base", "cli"} == set(LAYERS), "a package without a layer"
    assert _upward(graph) == []


def test_the_window_layer_imports_no_analyzer_service_or_cli() -> None:
    graph = _graph()
    window = {m: deps for m, deps in graph.items() if m.startswith("fleetscope.window")}
    assert len(window) >= 10
    for mod, deps in window.items():
        assert all(_layer(d)[0] == 0 or d.startswith("fleetscope.window") for d in deps), (mod, deps)


DETECTORS = "fleetscope.analyzers.detectors"
SIGNALS = "fleetscope.analyzers.signals"


def _detector_modules(graph: dict[str, set[str]]) -> set[str]:
    """The detectors' own modules (not the package's registry, not the shared interface)."""
    return {m for m in graph if m.startswith(f"{DETECTORS}.") and m != f"{DETECTORS}.base"}


def test_no_detector_imports_another_and_only_the_registry_imports_them() -> None:
    """Signals compute, detectors decide: what two places read is a signal, never a detector's helper."""
    graph = _graph()
    detectors = _detector_modules(graph)
    assert {f"{DETECTORS}.straggler", f"{DETECTORS}.mfu_drop", f"{DETECTORS}.failing_node"} <= detectors
    for mod in detectors:
        assert not graph[mod] & detectors, (mod, sorted(graph[mod] & detectors))
    importers = {mod for mod, deps in graph.items() if deps & detectors}
    assert importers == {DETECTORS}, sorted(importers)  # the registry (detectors/__init__.py) alone


def test_detectors_import_signals_and_signals_import_no_detector() -> None:
    graph = _graph()
    signals = {m for m in graph if m == SIGNALS or m.startswith(f"{SIGNALS}.")}
    assert {f"{SIGNALS}.window_signals", f"{SIGNALS}.slowness", f"{SIGNALS}.mfu"} <= signals
    for mod in signals:
        assert not any(d == DETECTORS or d.startswith(f"{DETECTORS}.") for d in graph[mod]), (mod, graph[mod])
    assert f"{SIGNALS}.window_signals" in graph[f"{DETECTORS}.base"]
    assert all(graph[m] & signals for m in _detector_modules(graph)), "a detector that reads no signal"


def test_features_import_nothing_from_the_signal_layer_and_per_job_signals_have_one_door() -> None:
    graph = _graph()
    features = "fleetscope.analyzers.features"
    assert not {d for d in graph[features] if d == SIGNALS or d.startswith(f"{SIGNALS}.")}, graph[features]
    doors = {f"{SIGNALS}.jobs", f"{SIGNALS}.mfu"}
    assert doors <= set(graph)
    importers = {mod for mod, deps in graph.items() if deps & doors}
    assert importers and all(m.startswith(f"{SIGNALS}.") for m in importers), sorted(importers)


def _private_imports(mod: str, path: Path, mods: set[str]) -> list[str]:
    """Names private to another module that ``mod`` imports or reads off an imported module."""
    tree = ast.parse(path.read_text())
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    bound: dict[str, str] = {}  # local name -> package module it is bound to
    bad = []

    def private(name: str) -> bool:
        return name.startswith("_") and not name.startswith("__")

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            if base not in mods and not any(f"{base}.{a.name}" in mods for a in node.names):
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in mods:
                    bound[alias.asname or alias.name] = sub
                if private(alias.name) and sub != mod:
                    bad.append(f"{mod}: from {base} import {alias.name}")
        elif isinstance(node, ast.Import):
            bound |= {a.asname: a.name for a in node.names if a.asname and a.name in mods}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in bound
            and private(node.attr)
        ):
            bad.append(f"{mod}: {bound[node.value.id]}.{node.attr}")
    return bad


def _private_uses() -> list[str]:
    mods = {_module(p): p for p in ROOT.rglob("*.py")}
    return sorted(b for mod, path in mods.items() for b in _private_imports(mod, path, set(mods)))


def test_no_module_imports_a_name_private_to_another() -> None:
    assert _private_uses() == []


def test_the_private_rule_finds_what_it_looks_for(tmp_path: Path) -> None:
    mods = {"fleetscope.a", "fleetscope.b", "fleetscope.pkg", "fleetscope.pkg.c"}
    src = tmp_path / "b.py"
    src.write_text(
        "from fleetscope.a import _hidden, shown, __version__\n"
        "from fleetscope.pkg import c as _c\n"
        "import fleetscope.a as a\n"
        "x = a._inner + _c._deep + a.public\n"
    )
    assert _private_imports("fleetscope.b", src, mods) == [
        "fleetscope.b: from fleetscope.a import _hidden",
        "fleetscope.b: fleetscope.a._inner",
        "fleetscope.b: fleetscope.pkg.c._deep",
    ]


def test_the_edges_follow_the_documented_rules() -> None:
    graph = _graph()
    # a lazy import counts: the record CLI imports the archive writer inside run()
    assert "fleetscope.window.archive.write" in graph["fleetscope.analyzers.record_cli"]
    # ``from package import module`` is an edge to the module, not to the package
    assert "fleetscope.telemetry.identity" in graph["fleetscope.telemetry.monitor"]
    assert "fleetscope.telemetry" not in graph["fleetscope.telemetry.monitor"]
    # an import under TYPE_CHECKING is not an edge (annotations only)
    assert "fleetscope.telemetry.monitor" not in graph["fleetscope.telemetry.writer"]


def test_the_checks_find_what_they_look_for() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
    up = {"fleetscope.window.frames": {"fleetscope.analyzers.core"}, "fleetscope.analyzers.core": set()}
    assert _upward(up) == ["fleetscope.window.frames (layer 1) -> fleetscope.analyzers.core (layer 3)"]
    sideways = {"fleetscope.window.frames": {"fleetscope.exporters.gpu"}, "fleetscope.exporters.gpu": set()}
    assert len(_upward(sideways)) == 1
