"""The committed dashboards are valid Grafana dashboard JSON: fixed uids, unique panel ids, a
datasource and a unit on every panel, the variables each dashboard needs, deterministic output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleetscope.dashboards import render

ROOT = Path(__file__).resolve().parents[2]
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
#: file -> (uid, the variables it must offer besides ``datasource``)
EXPECTED = {
    "cluster.json": ("fleetscope-cluster", set()),
    "gpu-node.json": ("fleetscope-gpu-node", {"Hostname"}),
    "efa.json": ("fleetscope-efa", {"Hostname"}),
    "fsx.json": ("fleetscope-fsx", {"Hostname"}),
    "training.json": ("fleetscope-training", {"job_id"}),
    "neuron-node.json": ("fleetscope-neuron-node", {"Hostname"}),
    "inference-fleet.json": ("fleetscope-inference-fleet", {"model"}),
    "inference-replica.json": ("fleetscope-inference-replica", {"model", "replica"}),
}
#: Panel types that hold data (rows are layout only: no datasource, no unit).
LAYOUT_TYPES = {"row"}


def _load(name: str) -> dict:
    return json.loads((ROOT / "dashboards" / name).read_text())


def _panels(panels: list[dict]) -> list[dict]:
    out = []
    for panel in panels:
        out.append(panel)
        out += _panels(panel.get("panels", []))
    return out


def test_the_dashboard_set() -> None:
    assert sorted(p.name for p in (ROOT / "dashboards").glob("*.json")) == sorted(EXPECTED)
    assert set(render.DASHBOARD_MODULES) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_dashboard_structure(name: str) -> None:
    board = _load(name)
    uid, needed_vars = EXPECTED[name]
    assert board["uid"] == uid
    assert board["title"].startswith("fleetscope / ")
    assert "fleetscope" in board["tags"]
    panels = _panels(board["panels"])
    ids = [p["id"] for p in panels]
    assert all(isinstance(i, int) and i > 0 for i in ids)
    assert len(ids) == len(set(ids)), f"duplicate panel ids in {name}"
    data_panels = [p for p in panels if p["type"] not in LAYOUT_TYPES]
    assert len(data_panels) >= 5
    for p in data_panels:
        where = f"{name}: {p['title']!r}"
        assert p["datasource"] == DATASOURCE, where
        assert p["fieldConfig"]["defaults"].get("unit"), f"{where} has no unit"
        assert p["targets"], f"{where} has no query"
        assert p["title"] and p["gridPos"]["w"] > 0 and p["gridPos"]["h"] > 0, where
        for t in p["targets"]:
            assert t["datasource"] == DATASOURCE, where
            assert t["expr"].strip(), where
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), where
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert needed_vars <= set(variables), f"{name} lacks variables {needed_vars - set(variables)}"
    for var in variables.values():
        if var["type"] == "query":
            assert var["datasource"] == DATASOURCE
    # Every variable a query uses is defined (Grafana's own ones start with __).
    used = {
        w.strip("${}")
        for p in data_panels
        for t in p["targets"]
        for w in t["expr"].split('"')
        if w.startswith("$") and not w.startswith("$__")
    } - {str(n) for n in range(10)}  # "$1": label_replace's capture reference, not a variable
    assert used <= set(variables), f"{name} uses undefined variables {used - set(variables)}"


def test_panels_do_not_overlap() -> None:
    for name in EXPECTED:
        cells: set[tuple[int, int]] = set()
        for p in _panels(_load(name)["panels"]):
            g = p["gridPos"]
            mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
            assert not cells & mine, f"{name}: {p['title']!r} overlaps another panel"
            assert g["x"] + g["w"] <= 24
            cells |= mine


def test_output_is_deterministic() -> None:
    first, second = render.dashboard_files(), render.dashboard_files()
    assert first == second
    for name, text in first.items():
        assert text == json.dumps(json.loads(text), sort_keys=True, indent=2) + "\n", name
