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
    spec = ScenarioSpec(
        nodes=4,
        duration_s=1500,
        seed=17,
        faults=[FaultSpec(kind="power_brake", at_s=420, node=3, gpu=2, slowdown=0.3)],
    )
    out, _ = write_scenario(spec, tmp_path_factory.mktemp("rec") / "r.om.gz")
    return out


def test_json_is_the_findings_schema(recording, capsys):
    assert main(["analyze", "--input", str(recording), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"window", "findings", "jobs", "goodput"}  # jobs, goodput: one entry per job
    for job in doc["jobs"].values():  # each job's state over the window, as the live page says it
        assert job["state"] in ("running", "stalled", "down") and job["states"]
        assert job["states"][0]["start"] == doc["window"]["start"] and job["states"][-1]["end"] is None
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


def test_progress_bar(recording, tmp_path, capsys):
    # Not -o /dev/null: before issue 36 the atomic write renamed over it, and as root replaced the
    # host's /dev/null with a regular file.
    out = str(tmp_path / "r.json")
    assert main(["analyze", "--input", str(recording), "--format", "json", "--progress", "-o", out]) == 0
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
    spec = ScenarioSpec(
        nodes=2,
        duration_s=1500,
        seed=23,
        model_name="NVIDIA L40S",
        faults=[FaultSpec(kind="data_stall", at_s=600, slowdown=0.3)],
    )
    out, _ = write_scenario(spec, tmp_path / "l40s.om")
    assert "fleetscope_gpu_peak_flops" not in out.read_text()
    assert main(["analyze", "--input", str(out), "--format", "json"]) == 0
    (d,) = json.loads(capsys.readouterr().out)["findings"]
    assert d["kind"] == "mfu_drop" and d["cause"] == "data_loading" and "tokens/s" in d["evidence"]


def test_html_report_names_rows_and_uses_units(recording, tmp_path):
    """Rows named node/rank, MFU in percent, tokens/s and durations a person reads, checkpoint (pause)
    bands drawn in the MFU plot, times without T and Z."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fleetscope.analyzers import report_html as rh
    from tests.support.analysis import analyze_file

    assert [rh.human_duration(s) for s in (0.45, 45, 380, 22060, 300000)] == [
        "0.45 s",
        "45 s",
        "6.3 min",
        "6.1 h",
        "3.5 days",
    ]
    assert rh.tokens_per_second(471859.2) == "471,859 tokens/s"
    assert rh.pause_spans([False, True, True, False, True]) == [(1, 2), (4, 4)]

    report = analyze_file(recording)
    feat = report.features
    order = sorted(range(len(feat.ranks.keys)), key=lambda k: int(float(feat.ranks.keys["rank"].iloc[k])))
    ticks, labels = rh.rank_labels(feat, order)
    assert (
        labels[0] == f"{feat.ranks.keys['Hostname'].iloc[order[0]]}/rank 0"
        and len(labels) == len(ticks) == 32
    )
    # The MFU plot shades the job's pauses (its checkpoints) and plots percent.
    drawn = []
    real_axvspan = plt.Axes.axvspan
    try:
        plt.Axes.axvspan = lambda self, *a, **k: drawn.append(k.get("color")) or real_axvspan(self, *a, **k)
        assert report.signals is not None and rh._mfu(report.signals, report)
    finally:
        plt.Axes.axvspan = real_axvspan
    (job,) = feat.jobs
    _, unit, paused = report.signals.job_mfu(job)
    assert unit == "MFU" and rh.pause_spans(paused), "the recording's job checkpoints"
    assert drawn.count("grey") == len(rh.pause_spans(paused))

    out = tmp_path / "r.html"
    assert main(["analyze", "--input", str(recording), "--format", "html", "-o", str(out)]) == 0
    page = out.read_text()
    jobs = page[page.index("<h2>Jobs</h2>") :]
    jobs = jobs[: jobs.index("</table>")]
    mfu = report.jobs[job].mfu
    assert f"{mfu:.1%}" in jobs and "tokens/s" in jobs and re.search(r"\d,\d{3} tokens/s", jobs)
    assert re.search(r"<td class='num'>\d+\.\d\d s</td>", jobs)  # step time with its unit
    assert re.search(r"<td class='nowrap'>2026-11-30 10:\d\d:\d\d</td>", page)  # start, no T or Z
