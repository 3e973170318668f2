"""The goodput account: it sums to the whole, matches the simulated truth within 2% of the window's
GPU-hours on the goodput family, names its findings, and the checkpoint advisor follows Young/Daly."""

from __future__ import annotations

import json
import math
import pickle

import pytest

from fleetscope.analyzers.checkpoint_advice import PRIOR_FAILURES_PER_NODE_HOUR, advise, daly, waste, young
from fleetscope.analyzers.evaluate import GOODPUT_BOUND, account_residual, evaluate
from fleetscope.analyzers.findings import findings_document
from fleetscope.analyzers.report import GOODPUT_CATEGORIES
from fleetscope.analyzers.report_text import render_text
from fleetscope.cli import main
from fleetscope.simulate.record import write_scenario
from fleetscope.simulate.spec import FaultSpec, ScenarioSpec
from tests.support.analysis import analyze_file


@pytest.mark.slow
def test_goodput_family_within_two_percent_and_detected(fixtures, tmp_path):
    """Every badput category of every goodput scenario within 2% of its GPU-hours of the truth."""
    report = evaluate(fixtures / "scenarios", workdir=tmp_path, families=["goodput"])
    assert len(report.results) >= 4
    gp = report.goodput()["goodput"]
    assert gp["jobs"] == len(report.results)
    assert gp["within_bound"], gp
    for r in report.results:
        for job, errs in r.goodput.items():
            for cat in GOODPUT_CATEGORIES:
                if cat != "productive":
                    assert abs(errs[cat]) <= GOODPUT_BOUND, (r.name, job, cat, errs)
            assert abs(errs["whole"]) <= 0.01, (r.name, errs)
    assert report.goodput_sums_to_whole()
    fam = report.per_family()["goodput"]
    assert fam["recall"] >= 0.95 and fam["precision"] >= 0.95, report.render()


@pytest.fixture(scope="module")
def rework(tmp_path_factory):
    """A job that hangs on an XID 79, restarts on a spare from a 500 s old checkpoint."""
    spec = ScenarioSpec(
        name="gp",
        family="goodput",
        nodes=4,
        seed=991,
        duration_s=1800,
        checkpoint_every_s=500,
        faults=[
            FaultSpec(kind="hang", cause="xid79", at_s=1000, stall_s=240, node=2, gpu=5, restart="replace")
        ],
    )
    out, truth = write_scenario(spec, tmp_path_factory.mktemp("gp") / "gp.om")
    return analyze_file(out), json.loads(truth.read_text()), out


def test_account_sums_and_attributes(rework):
    report, truth, _ = rework
    a = report.goodput["4711"]
    assert set(a.gpu_seconds) == set(GOODPUT_CATEGORIES)
    assert math.isclose(sum(a.gpu_seconds.values()), a.whole_gpu_seconds, rel_tol=1e-12)
    assert account_residual(report.goodput) < 1e-12
    assert math.isclose(a.whole_gpu_seconds, truth["goodput"]["4711"]["whole_gpu_seconds"], rel_tol=0.01)
    assert a.restarts == 1 and a.inputs["global_step"]
    assert a.gpu_seconds["rework"] > 0.02 * a.whole_gpu_seconds
    useful = a.gpu_seconds["productive"] + a.gpu_seconds["slowdown"]
    assert a.effective_training_ratio == pytest.approx(useful / a.whole_gpu_seconds)
    named = {
        i.category
        for i in a.items
        if i.finding and i.finding.startswith("XID 79") and "ip-10-1-0-12" in i.finding
    }
    assert {"stall", "recovery", "rework"} <= named
    assert any(
        "XID 79 (gpu_lost) on ip-10-1-0-12 gpu 5 cost" in i.text and "rework" in i.text for i in a.items
    )
    # Plain data: it pickles (the service's analysis child) and lands in the JSON document.
    back = pickle.loads(pickle.dumps(report))
    assert back.goodput["4711"].gpu_seconds == a.gpu_seconds
    doc = json.loads(json.dumps(report.document()))
    assert list(doc)[:2] == ["window", "findings"]
    g = doc["goodput"]["4711"]
    assert g["whole_gpu_hours"] == pytest.approx(a.whole_gpu_seconds / 3600, abs=1e-3)
    assert g["checkpoint_advice"]["failures"] == 1 and not g["checkpoint_advice"]["prior"]
    assert "goodput" not in findings_document(report.findings, report.start, report.end)
    assert set(report.document()) == {"window", "findings", "jobs", "goodput"}
    text = render_text(report)
    assert "goodput of job 4711" in text and "effective training time" in text and "checkpoint every" in text


def test_account_without_the_global_step_infers_rework_from_checkpoints(rework, tmp_path):
    """Recordings without training_global_step (older telemetry): rework from the last checkpoint."""
    _report, truth, out = rework
    lines = [
        ln
        for ln in out.read_text().splitlines(keepends=True)
        if not ln.startswith(
            ("training_global_step", "# TYPE training_global_step", "# HELP training_global_step")
        )
    ]
    bare = tmp_path / "bare.om"
    bare.write_text("".join(lines))
    b = analyze_file(bare).goodput["4711"]
    assert not b.inputs["global_step"]
    true = truth["goodput"]["4711"]
    for cat in ("rework", "stall", "recovery", "checkpoint"):
        assert (
            abs(b.gpu_seconds[cat] - true["gpu_seconds"][cat]) <= GOODPUT_BOUND * true["whole_gpu_seconds"]
        ), cat


def test_checkpoint_advisor():
    assert young(60, 86400) == pytest.approx(math.sqrt(2 * 60 * 86400))
    assert young(60, 86400) < daly(60, 86400) + 60 < young(60, 86400) * 1.05
    assert daly(100, 40) == 40  # a save longer than 2 MTBF: checkpoint every MTBF
    # No failure in the window: the prior of one per 250 node-days (the published fleet rates).
    adv = advise(60.0, 3, 16, 128, 0, 16 * 2.0, 600.0)
    assert adv.prior and adv.failures_per_node_hour == PRIOR_FAILURES_PER_NODE_HOUR
    assert adv.mtbf_s == pytest.approx(250 * 24 * 3600 / 16, rel=1e-6)
    # Configurable: a fleet that knows its own rate.
    own = advise(60.0, 3, 16, 128, 0, 16 * 2.0, 600.0, prior_node_days=1000.0)
    assert own.prior and own.mtbf_s == pytest.approx(4 * adv.mtbf_s, rel=1e-6)
    # Daly's interval for the measured save cost and the window's failures.
    two = advise(45.0, 3, 8, 64, 2, 8 * 4.0, 1500.0)
    assert two.mtbf_s == pytest.approx(3600 / (2 / 32.0 * 8))
    assert two.recommended_s == pytest.approx(daly(45.0, two.mtbf_s) + 45.0, abs=0.1)
    assert adv.recommended_s > adv.current_s and adv.gain_gpu_hours_per_day > 0
    assert adv.waste_recommended <= waste(600 - 60, 60, adv.mtbf_s)
    # Two failures in 10 node-hours: a much shorter interval than the prior gives.
    fast = advise(60.0, 3, 16, 128, 2, 10.0, 600.0)
    assert not fast.prior and fast.recommended_s < adv.recommended_s


def test_evaluate_cli_goodput_flag(tmp_path, capsys):
    folder = tmp_path / "suite"
    folder.mkdir()
    (folder / "goodput_ck.json").write_text(
        json.dumps(
            {
                "family": "goodput",
                "nodes": 4,
                "seed": 992,
                "duration_s": 900,
                "checkpoint_every_s": 300,
                "faults": [{"kind": "fsx_saturation", "at_s": 200, "slowdown": 3.0}],
            }
        )
    )
    assert main(["evaluate", str(folder), "-q", "--json", "-", "--goodput"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["goodput"]["goodput"]["within_bound"] and doc["goodput_sums_to_whole"]
