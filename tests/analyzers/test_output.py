"""Output formats: the JSON findings document, the text table, the self-contained HTML report."""

from __future__ import annotations

import json
import re

import pytest

from fleetscope.cli import main
from fleetscope.simulate.record import write_scenario
from fleetscope.simulate.spec import FaultSpec, ScenarioSpec


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    spec = ScenarioSpec(nodes=4, duration_s=1500, seed=17, faults=[
        FaultSpec(kind="power_brake", at_s=420, node=3, gpu=2, slowdown=0.3)])  # fmt: skip
    out, _ = write_scenario(spec, tmp_path_factory.mktemp("rec") / "r.om.gz")
    return out


def test_json_is_the_findings_schema(recording, capsys):
    assert main(["analyze", "--input", str(recording), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"window", "findings", "goodput"}  # goodput: one account per job
    assert doc["window"] == {"start": "2026-11-30T10:00:00Z", "end": "2026-11-30T10:25:00Z"}
    keys = [
        "kind",
        "severity",
        "node",
        "gpu",
        "rank",
        "job_id",
        "start",
        "end",
        "score",
        "cause",
        "evidence",
        "action",
    ]
    rfc = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
    for f in doc["findings"]:
        assert list(f) == keys
        assert rfc.match(f["start"]) and (f["end"] is None or rfc.match(f["end"]))
        assert all(isinstance(v, str) for v in f["evidence"].values())
    (s,) = [f for f in doc["findings"] if f["kind"] == "straggler"]
    assert (s["node"], s["gpu"], s["rank"], s["job_id"], s["cause"]) == (
        "ip-10-1-0-13",
        "2",
        26,
        "4711",
        "power_brake",
    )
    assert s["score"] > 1.2 and "DCGM_FI_DEV_SM_CLOCK" in s["evidence"]
    (d,) = [f for f in doc["findings"] if f["kind"] == "mfu_drop"]
    assert d["cause"] == "straggler" and "change_points" in d["evidence"]


def test_progress_bar(recording, capsys):
    assert (
        main(["analyze", "--input", str(recording), "--format", "json", "--progress", "-o", "/dev/null"]) == 0
    )
    err = capsys.readouterr().err
    assert "loading [" in err and "100%" in err and "analyzed in" in err


def test_text_table(recording, capsys):
    assert main(["analyze", "--input", str(recording), "--format", "text"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1].split() == [
        "KIND",
        "SEVERITY",
        "NODE",
        "GPU",
        "RANK",
        "START",
        "END",
        "SCORE",
        "CAUSE",
    ]
    assert "power_brake" in out and "ip-10-1-0-13: degraded" in out


def test_html_is_self_contained(recording, tmp_path):
    out = tmp_path / "r.html"
    assert main(["analyze", "--input", str(recording), "--format", "html", "-o", str(out)]) == 0
    page = out.read_text()
    assert page.count("data:image/png;base64,") == 3
    assert not re.search(r"""(src|href)=["']https?://""", page)
    for title in ("Per-rank compute time", "MFU timeline", "Node health"):
        assert title in page


def test_tokens_per_second_where_flops_are_unknown(tmp_path, capsys):
    """A GPU model without a peak-FLOPs entry: the drop is measured in tokens/s instead of MFU."""
    spec = ScenarioSpec(nodes=2, duration_s=1500, seed=23, model_name="NVIDIA L40S",
                        faults=[FaultSpec(kind="data_stall", at_s=600, slowdown=0.3)])  # fmt: skip
    out, _ = write_scenario(spec, tmp_path / "l40s.om")
    assert "fleetscope_gpu_peak_flops" not in out.read_text()
    assert main(["analyze", "--input", str(out), "--format", "json"]) == 0
    (d,) = json.loads(capsys.readouterr().out)["findings"]
    assert d["kind"] == "mfu_drop" and d["cause"] == "data_loading" and "tokens/s" in d["evidence"]
