"""``fleetscope evaluate`` reports the onset-to-finding delay per finding kind (fast: no simulation)."""

from __future__ import annotations

from fleetscope.analyzers.evaluate import SuiteReport, score_scenario
from fleetscope.analyzers.findings import Finding
from fleetscope.simulate.record import ground_truth
from fleetscope.simulate.spec import FaultSpec, ScenarioSpec, node_name
from fleetscope.times import rfc3339


def _found(kind: str, node: str | None, start: float, confirmed: float, cause: str) -> Finding:
    return Finding(
        kind=kind,
        severity="warning",
        node=node,
        start=start,
        cause=cause,
        action="",
        evidence={"confirmed_at": rfc3339(confirmed) or ""},
    )


def test_delays_are_reported_per_finding_kind_from_onset_to_confirmation():
    throttle = ScenarioSpec(
        name="t1", nodes=2, faults=[FaultSpec(kind="thermal_throttle", at_s=300, node=1, gpu=3)]
    )
    lost = ScenarioSpec(name="t2", nodes=2, faults=[FaultSpec(kind="gpu_lost", at_s=600, node=0, gpu=1)])
    onset1, onset2 = throttle.start + 300, lost.start + 600
    slow = _found("straggler", node_name(1), onset1 + 15, onset1 + 45, "thermal_throttle")
    slow.gpu = "3"
    gone = _found("failing_node", node_name(0), onset2, onset2 + 5, "gpu_lost")
    gone.gpu = "1"
    rep = SuiteReport(
        [score_scenario(ground_truth(throttle), [slow]), score_scenario(ground_truth(lost), [gone])]
    )
    by = rep.delays_by_kind()
    assert by["straggler"] == {"found": 1, "max_delay_s": 45.0, "mean_delay_s": 45.0, "median_delay_s": 45.0}
    assert by["failing_node"]["found"] == 1 and by["failing_node"]["max_delay_s"] == 5.0
    assert "mfu_drop" not in by  # an optional expectation is no delay of its kind
    text = rep.render()
    assert "DELAY BY FINDING KIND" in text
    row = next(line for line in text.splitlines() if line.startswith("straggler") and line.endswith(" s"))
    assert row.split()[1:] == ["1", "45", "s", "45", "s", "45", "s"]
    assert rep.to_dict()["delays_by_kind"]["straggler"]["found"] == 1
