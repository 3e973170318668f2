"""``/api/v1/jobs/{job}/goodput``: a real analysis's account, served as the analyzers wrote it."""

from __future__ import annotations

import pytest

from fleetscope.analyzers.report import GOODPUT_CATEGORIES
from fleetscope.simulate.record import write_scenario
from fleetscope.simulate.spec import FaultSpec, ScenarioSpec
from tests.support.analysis import analyze_file


@pytest.fixture(scope="module")
def slow_checkpoints(tmp_path_factory):
    spec = ScenarioSpec(
        name="goodput_api",
        family="goodput",
        nodes=2,
        seed=993,
        duration_s=900,
        checkpoint_every_s=300,
        faults=[FaultSpec(kind="fsx_saturation", at_s=100, slowdown=3.0)],
    )
    out, _ = write_scenario(spec, tmp_path_factory.mktemp("gpapi") / "gp.om")
    return analyze_file(out)


def test_job_goodput_answer(make_client, scripted, slow_checkpoints):
    scripted.result = slow_checkpoints
    client = make_client()
    r = client.get("/api/v1/jobs/4711/goodput")
    assert r.status_code == 200
    g = r.json()["goodput"]
    assert g["job_id"] == "4711" and set(g["gpu_hours"]) == set(GOODPUT_CATEGORIES)
    assert sum(g["gpu_seconds"].values()) == pytest.approx(g["whole_gpu_hours"] * 3600, rel=1e-6)
    assert g["gpu_hours"]["checkpoint"] > 0.1 * g["whole_gpu_hours"]  # saves three times slower
    assert any(b["category"] == "checkpoint" for b in g["badput"])
    adv = g["checkpoint_advice"]
    assert adv["prior"] is True and adv["recommended_s"] > adv["current_s"]
    assert r.json()["window"]["start"] is not None
    missing = client.get("/api/v1/jobs/nope/goodput")
    assert missing.status_code == 404 and missing.json()["detail"] == "unknown job"


def test_job_goodput_503_before_the_first_analysis(make_client):
    r = make_client(analyzed=False).get("/api/v1/jobs/4711/goodput")
    assert r.status_code == 503
