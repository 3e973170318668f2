"""--input FILE and --prometheus URL give the same findings (the file backfilled into Prometheus)."""

from __future__ import annotations

import json

import pytest

from fleetscope.cli import main
from fleetscope.simulate.record import write_scenario
from fleetscope.simulate.spec import FaultSpec, ScenarioSpec
from fleetscope.window import prometheus as load_prometheus
from tests.support.analysis import analyze_file, analyze_prometheus
from tests.support.findings import assert_same_findings
from tests.support.prom import Prometheus, backfill_openmetrics


@pytest.mark.server
def test_file_and_prometheus_give_identical_findings(tmp_path, capsys, monkeypatch):
    spec = ScenarioSpec(
        name="same",
        nodes=4,
        duration_s=1500,
        seed=9,
        faults=[
            FaultSpec(kind="gpu_lost", at_s=600, node=2, gpu=6, restart="replace"),
            FaultSpec(kind="thermal_throttle", at_s=300, node=0, gpu=1, slowdown=0.3),
        ],
    )
    out, _ = write_scenario(spec, tmp_path / "s.om")
    assert main(["analyze", "--input", str(out), "--format", "json"]) == 0
    from_file = json.loads(capsys.readouterr().out)
    kinds = {(f["kind"], f["cause"]) for f in from_file["findings"]}
    assert ("failing_node", "gpu_lost") in kinds and ("straggler", "thermal_throttle") in kinds
    backfill_openmetrics(out, tmp_path / "data")
    w = from_file["window"]
    with Prometheus(tmp_path / "p", data_dir=tmp_path / "data") as prom:
        rc = main(
            [
                "analyze",
                "--prometheus",
                prom.url,
                "--start",
                w["start"],
                "--end",
                w["end"],
                "--step",
                "15",
                "--format",
                "json",
            ]
        )
        assert rc == 0
        from_prom = json.loads(capsys.readouterr().out)
        # Streamed in 10-minute chunks (--chunk): the same findings, one chunk in memory at a time.
        rc = main(
            [
                "analyze",
                "--prometheus",
                prom.url,
                "--start",
                w["start"],
                "--end",
                w["end"],
                "--step",
                "15",
                "--chunk",
                "10m",
                "--format",
                "json",
            ]
        )
        assert rc == 0
        streamed = json.loads(capsys.readouterr().out)
        # Chunked by time (tiny chunks here) the answer is the same.
        monkeypatch.setattr(load_prometheus, "MAX_POINTS", 7)
        chunked = analyze_prometheus(prom.url, w["start"], w["end"], 15.0)
    assert from_prom == from_file
    assert streamed["window"] == from_file["window"]
    assert_same_findings(from_file, streamed)
    assert chunked.document() == from_file
    # The service's API gives the same, with node verdicts and scores filled.
    analysis = analyze_file(out)
    assert analysis.nodes["ip-10-1-0-12"].state == "failing"
    assert analysis.nodes["ip-10-1-0-12"].gpus["6"] == "failing"
    assert analysis.nodes["ip-10-1-0-10"].state == "degraded"
    (job,) = analysis.jobs.values()
    assert job.ranks == 32 and job.mfu and 0.2 < job.mfu < 0.5 and job.stragglers == [1]
    scores = {s.rank: s.score for s in analysis.straggler_scores}
    assert scores[1] > 1.2 and abs(scores[5] - 1) < 0.05
