"""The demo's own argument checks (the end-to-end run is in test_demo.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from fleetscope.demo.cli import positive_duration
from fleetscope.demo.stack import HANG_FAULTS, hang_scenario
from fleetscope.service.live import live_result
from fleetscope.simulate.record import write_scenario
from fleetscope.simulate.spec import ScenarioSpec, node_name
from tests.support.analysis import analyze_file


def test_durations_are_prometheus_durations_or_seconds() -> None:
    assert positive_duration("90") == 90.0
    assert positive_duration("1.5") == 1.5
    assert positive_duration("2m") == 120.0
    assert positive_duration("1h30m") == 5400.0


@pytest.mark.parametrize(
    ("text", "message"), [("0", "must be > 0"), ("5x", "not a duration: '5x'"), ("", "not a duration")]
)
def test_a_bad_duration_is_one_argparse_error(text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        positive_duration(text)


@pytest.mark.parametrize(
    ("fault", "reason"),
    [("hang_not_launched", "not_launched"), ("hang_dead_rank", "dead")],
)
def test_a_demo_hang_is_a_ras_scenario_whose_job_row_names_the_rank(
    tmp_path: Path, fault: str, reason: str
) -> None:
    """``demo --fault hang_*`` runs the training simulator's hang with NCCL RAS series; the first
    minutes of it, analyzed as the service does, name the rank, node and GPU the collective waits
    for (rank 12 is node 1's GPU 4 in a 4-node job of 8 GPUs a node)."""
    args = argparse.Namespace(fault=fault, nodes=4, seed=1, fault_at=60.0, fault_node=1, fault_gpu=4)
    data = hang_scenario(args)
    assert data["nccl_ras"] is True and data["faults"][0]["cause"] == HANG_FAULTS[fault]
    spec = ScenarioSpec.from_dict({**data, "duration_s": 300.0})
    out, _ = write_scenario(spec, tmp_path / "demo.om")
    (job,) = live_result(analyze_file(out)).jobs.values()
    hang = job["hang"]
    assert hang is not None and hang["reason"] == reason, job
    assert hang["waiting_for"] == f"rank 12 (node {node_name(1)}, GPU 4)"
    assert job["state"] == "stalled"
