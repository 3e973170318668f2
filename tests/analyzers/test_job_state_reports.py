"""The post-mortem reports say what the page says (issue 33, part 3): each job's state over the
window (running / stalled since / down, with times) in the text, JSON and HTML reports, from the
same account the live page reads; the last MFU of a stalled job is said as the last one; durations
a person reads are human ("5.0 min", not "300 s"); the heatmap labels every rank a finding names."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from fleetscope.analyzers import report_html as rh
from fleetscope.analyzers.report import CheckpointAdvice, GoodputAccount, Report
from fleetscope.analyzers.report_text import render_text
from fleetscope.service.live import live_result
from fleetscope.simulate.record import write_scenario
from fleetscope.simulate.spec import FaultSpec, ScenarioSpec
from fleetscope.times import parse_rfc3339, rfc3339
from fleetscope.window.sources import open_source
from tests.support.analysis import analyze_file

ONSET, RESTART_S = 300.0, 300.0


@pytest.fixture(scope="module")
def recording(tmp_path_factory) -> tuple[Path, ScenarioSpec]:
    """The demo's GPU loss (4 nodes, seed 1) 5 minutes in; the job restarts 5 minutes later."""
    spec = ScenarioSpec(
        name="gpu_lost_resume",
        nodes=4,
        seed=1,
        duration_s=1200,
        faults=[FaultSpec(kind="gpu_lost", at_s=ONSET, node=1, gpu=3, stall_s=RESTART_S)],
    )
    out, _ = write_scenario(spec, tmp_path_factory.mktemp("rec") / "s.om")
    return out, spec


def test_a_job_stalled_at_the_window_end_reads_stalled_since_in_every_report(recording):
    path, spec = recording
    end = spec.start + ONSET + 240  # 4 minutes into the stall
    report = analyze_file(path, end=end)
    page = live_result(report).jobs  # what the live page shows for the same window
    ((job, shown),) = page.items()
    assert shown["state"] == "stalled"
    since = parse_rfc3339(shown["since"])
    assert since is not None and abs(since - (spec.start + ONSET)) <= 15
    summary = report.jobs[job]
    assert (summary.state, summary.since) == ("stalled", since)  # the same account as the page
    assert [s.state for s in summary.states] == ["running", "stalled"]
    assert summary.states[1].start == since and summary.states[1].end is None

    text = render_text(report)
    line = next(x for x in text.splitlines() if x.startswith(f"job {job}:"))
    clock = (rfc3339(since) or "")[11:19]
    assert f"stalled since {clock} (" in line, line
    assert "MFU n/a while stalled (last " in line, line  # not a bare last MFU under a stall
    assert f"stalled {clock}-end" in text

    doc = report.document()["jobs"][job]
    assert doc["state"] == "stalled" and doc["since"] == shown["since"]
    assert [s["state"] for s in doc["states"]] == ["running", "stalled"] and doc["states"][1]["end"] is None

    html = rh.render_html(report)
    assert f"stalled since {rh._clock(since)}" in html and "n/a while stalled (last " in html


def test_a_resumed_job_shows_its_stall_with_times_and_agrees_with_the_hang(recording):
    path, spec = recording
    report = analyze_file(path)
    ((_, summary),) = report.jobs.items()
    assert summary.state == "running" and summary.since is None
    assert [s.state for s in summary.states] == ["running", "stalled", "running"], summary.states
    stall = summary.states[1]
    assert abs(stall.start - (spec.start + ONSET)) <= 15
    assert stall.end is not None and RESTART_S - 30 <= stall.end - stall.start <= RESTART_S + 90
    # The finding that says the job stalled names the same start.
    said = [v for f in report.findings for k, v in f.evidence.items() if k in ("hang", "no_progress")]
    assert said and all(rfc3339(stall.start) in v for v in said), said
    text = render_text(report)
    assert re.search(r"stalled \d\d:\d\d:\d\d-\d\d:\d\d:\d\d \(\d+\.\d min\)", text), text


def test_a_streamed_window_tells_the_states_of_every_chunk(recording):
    from fleetscope.analyzers.analyze_source import analyze_source
    from fleetscope.analyzers.core import LOADED

    path, _ = recording
    whole = analyze_file(path)
    streamed = analyze_source(open_source(path, None, LOADED), chunk="5m")
    ((job, a),) = whole.jobs.items()
    b = streamed.jobs[job]
    assert [s.state for s in b.states] == [s.state for s in a.states], (a.states, b.states)
    for x, y in zip(a.states, b.states, strict=True):
        assert abs(x.start - y.start) <= 30 and ((x.end is None) == (y.end is None))


def test_checkpoint_advice_reads_in_human_durations():
    advice = CheckpointAdvice(
        save_s=45.0, saves=3, nodes=4, failures=0, node_hours=1.0, failures_per_node_hour=1 / 6000,
        prior=True, mtbf_s=1_500_000.0, young_s=11_600.0, daly_s=11_038.0, recommended_s=11_038.0,
        current_s=300.0,
    )  # fmt: skip
    account = GoodputAccount("4711", 0.0, 3600.0, 32, 115_200.0, {"productive": 115_200.0}, advice=advice)
    text = render_text(Report(start=0.0, end=3600.0, goodput={"4711": account}))
    line = next(x for x in text.splitlines() if "checkpoint every" in x)
    assert "checkpoint every 3.1 h (now 5.0 min; save 45 s, MTBF 17.4 days" in line, line
    assert "Young 3.2 h, Daly 3.1 h" in line, line
    assert not [n for n in re.findall(r"(\d+) s\b", line) if int(n) >= 120], line  # never "11038 s"


def test_the_heatmap_labels_every_flagged_rank(recording):
    path, _ = recording
    feat = analyze_file(path).features
    assert feat is not None
    order = np.argsort([int(float(r)) for r in feat.ranks.keys["rank"]], kind="stable")
    n = len(order)
    flagged = [1, 2, 13, n - 1]  # neighbours, and rows a sparse spacing would have skipped
    ticks, labels = rh.rank_labels(feat, order, most=8, flagged=flagged)
    assert set(flagged) <= set(ticks) and len(ticks) == len(labels) <= 8 + len(flagged)
    spacing = -(-n // (8 - len(flagged)))
    for t in set(ticks) - set(flagged):  # no other label crowds a flagged one
        assert all(abs(t - f) >= spacing for f in flagged), (t, ticks)
    keys = feat.ranks.keys
    for t, label in zip(ticks, labels, strict=True):
        assert label == f"{keys['Hostname'].iloc[order[t]]}/rank {int(float(keys['rank'].iloc[order[t]]))}"
