"""The hang detector with NCCL RAS series: simulated hangs of each reason class are named (rank, node,
GPU, reason) within 2 minutes of their onset; a healthy job's moving skew gives no finding; without
RAS the findings are what they were (the simulator's ``nccl_ras`` flag off)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetscope.analyzers.report import Report
from fleetscope.service.plan import candidates_from
from fleetscope.simulate.record import write_scenario
from fleetscope.simulate.spec import DEFAULT_START, ScenarioSpec
from fleetscope.times import parse_time
from tests.support.analysis import analyze_file

ONSET_S = 600
NODE, GPU, RANK, HOST = 1, 4, 12, "ip-10-1-0-11"


def run(tmp_path: Path, cause: str | None, ras: bool = True, **extra: object) -> Report:
    faults = [] if cause is None else [{"kind": "hang", "cause": cause, "at_s": ONSET_S, "stall_s": 1200,
                                        "node": NODE, "gpu": GPU, "restart": "same"}]  # fmt: skip
    spec = ScenarioSpec.from_dict(
        {
            "family": "hang",
            "nodes": 4,
            "seed": 7,
            "duration_s": 1500,
            "nccl_ras": ras,
            "faults": faults,
            **extra,
        }
    )
    out, _ = write_scenario(spec, tmp_path / "s.om")
    return analyze_file(out)


def onset_to_finding(f) -> float:
    return parse_time(f.evidence["confirmed_at"]) - (DEFAULT_START + ONSET_S)


def test_not_launched_names_the_stuck_rank_and_drains_nothing(tmp_path):
    report = run(tmp_path, "host")
    [f] = [f for f in report.findings if f.kind in ("job_hang", "failing_node")]
    assert (f.kind, f.rank, f.gpu, f.evidence["reason"]) == ("job_hang", RANK, str(GPU), "not_launched")
    assert f.evidence["waiting_for"] == f"rank {RANK} (node {HOST}, GPU {GPU})"
    assert 0 < onset_to_finding(f) <= 120
    assert candidates_from(report.findings) == []  # software: the node is not drained


def test_dead_rank_names_its_node_and_is_drained(tmp_path):
    report = run(tmp_path, "xid79")
    failing = [f for f in report.findings if f.kind == "failing_node"]
    assert [(f.node, f.gpu, f.rank) for f in failing] == [(HOST, str(GPU), RANK)]
    f = failing[0]
    assert (
        f.evidence["reason"] == "dead"
        and f.evidence["waiting_for"] == f"rank {RANK} (node {HOST}, GPU {GPU})"
    )
    assert onset_to_finding(f) <= 120
    assert [c.node for c in candidates_from(report.findings)] == [HOST]


@pytest.mark.parametrize("cause", ["efa", "gpu_vanish"])
def test_launched_not_completed_with_hardware_evidence_drains_that_node(tmp_path, cause):
    report = run(tmp_path, cause)
    failing = [f for f in report.findings if f.kind == "failing_node"]
    assert [f.node for f in failing] == [HOST]
    f = failing[0]
    assert (
        f.evidence["reason"] == "launched_not_completed" and "launched everywhere" in f.evidence["nccl_ras"]
    )
    assert onset_to_finding(f) <= 120
    assert [c.node for c in candidates_from(report.findings)] == [HOST]


def test_healthy_job_with_moving_skew_gives_no_finding(tmp_path):
    report = run(tmp_path, None, checkpoint_every_s=300, eval_every_s=400)
    assert [f for f in report.findings if f.kind in ("job_hang", "failing_node")] == []


def test_without_ras_the_host_hang_is_found_as_before(tmp_path):
    report = run(tmp_path, "host", ras=False)
    [f] = [f for f in report.findings if f.kind == "job_hang"]
    assert "reason" not in f.evidence and f.rank is None
    assert parse_time(f.evidence["confirmed_at"]) - (DEFAULT_START + ONSET_S) >= 180  # hang_s: later
