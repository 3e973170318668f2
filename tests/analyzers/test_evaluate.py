"""The committed scenario suite: every kind at precision and recall >= 0.95, found in time."""

from __future__ import annotations

import json

from fleetscope.analyzers.evaluate import evaluate
from fleetscope.cli import main
from fleetscope.simulate.spec import FAULT_KINDS, ScenarioSpec

FAIL_STOP = ("gpu_lost", "ecc_uncorrectable", "row_remap_failure", "pcie_width_drop")
FAIL_SLOW = ("thermal_throttle", "power_brake", "efa_degraded", "data_stall")


def test_suite_shape(fixtures):
    specs = [ScenarioSpec.load(p) for p in sorted((fixtures / "scenarios").glob("*.json"))]
    assert len(specs) >= 20
    kinds = [s.faults[0].kind if s.faults else "healthy" for s in specs]
    for kind in FAULT_KINDS:
        assert kinds.count(kind) >= (5 if kind == "healthy" else 3), kind
    sizes = {s.nodes for s in specs}
    assert min(sizes) == 4 and max(sizes) == 64
    assert len({s.seed for s in specs}) == len(specs)


def test_evaluate_meets_the_thresholds(fixtures, tmp_path):
    report = evaluate(fixtures / "scenarios", workdir=tmp_path)
    per_kind = report.per_kind()
    for kind, k in per_kind.items():
        assert k["precision"] >= 0.95, (kind, k, report.render())
        assert k["recall"] >= 0.95, (kind, k, report.render())
        assert k["expected"] >= 3
    delays = report.delays()
    for kind in FAIL_STOP:
        assert delays[kind]["detected"] == delays[kind]["faults"]
        assert delays[kind]["max_delay_s"] <= 120, (kind, delays[kind])
    for kind in FAIL_SLOW:
        assert delays[kind]["detected"] == delays[kind]["faults"]
        assert delays[kind]["max_delay_s"] <= 600, (kind, delays[kind])
    healthy = [r for r in report.results if not r.faults]
    assert len(healthy) >= 5 and all(not r.findings for r in healthy)


def test_evaluate_cli_json_and_exit_code(tmp_path, capsys):
    folder = tmp_path / "suite"
    folder.mkdir()
    (folder / "pcie.json").write_text(json.dumps({"nodes": 4, "seed": 5, "duration_s": 900,
        "faults": [{"kind": "pcie_width_drop", "at_s": 300, "node": 2, "gpu": 1}]}))  # fmt: skip
    assert main(["evaluate", str(folder), "-q", "--json", "-", "--min-recall", "0.95"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["per_kind"]["failing_node"]["recall"] == 1.0
    assert main(["evaluate", str(tmp_path / "none")]) == 1
    assert "no scenario specs" in capsys.readouterr().err
