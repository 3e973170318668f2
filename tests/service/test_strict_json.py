"""Strict JSON everywhere (issue 36, item 2): one rank's counters at 1.7e308 (anyone who can write
the shared training folder can do it) made ``/api/v1/jobs``, ``/jobs/{id}`` and ``/goodput`` answer
500 and ``analyze --format json`` write ``NaN`` 21 times. Every answer and the report are parsed
here with a parser that refuses ``NaN``/``Infinity``, as a browser's ``JSON.parse`` does."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from fleetscope import strictjson
from fleetscope.analyzers.features import MAX_STEP_S, physical_increase
from fleetscope.cli import main
from fleetscope.service.app import ServiceSettings, create_app
from fleetscope.service.live import LiveResult, live_result
from fleetscope.simulate.record import write_scenario
from fleetscope.simulate.spec import ScenarioSpec
from tests.service.support import ScriptedAnalyze, make_analysis
from tests.support.analysis import analyze_file

HUGE = 1.7e308
COUNTERS = ("training_step_seconds_total{", "training_model_flops_total{", "training_steps_total{")


def strict_loads(text: str | bytes) -> object:
    def refuse(name: str) -> None:
        raise ValueError(f"not strict JSON: {name}")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def huge_recording(tmp_path_factory) -> Path:
    """A simulated job whose rank 3 jumps to counters of 1.7e308 half-way through."""
    folder = tmp_path_factory.mktemp("huge")
    spec = ScenarioSpec(name="huge", nodes=2, duration_s=1800, seed=7)
    out, _ = write_scenario(spec, folder / "r.om")
    half = spec.start + 900
    lines = []
    for line in out.read_text().splitlines(keepends=True):
        if 'rank="3"' in line and line.startswith(COUNTERS):
            head, _value, ts = line.rsplit(" ", 2)
            if float(ts) > half:
                line = f"{head} {HUGE!r} {ts}"
        lines.append(line)
    huge = folder / "huge.om"
    huge.write_text("".join(lines))
    return huge


def test_analyze_json_is_strict_with_huge_counters(huge_recording, tmp_path, caplog) -> None:
    out = tmp_path / "report.json"
    assert main(["analyze", "--input", str(huge_recording), "--format", "json", "-o", str(out)]) == 0
    doc = strict_loads(out.read_text())
    assert isinstance(doc, dict)
    (account,) = doc["goodput"].values()
    assert 0.0 <= account["goodput_ratio"] <= 1.0  # a number, not null: the impossible counters left out
    assert "no rank can make" in caplog.text and "training_step_seconds_total" in caplog.text


def _paths(client: TestClient, job: str) -> list[str]:
    spec = client.get("/openapi.json").json()
    paths = []
    for path, ops in spec["paths"].items():
        if "get" in ops:
            paths.append(path.replace("{job_id}", job))
    return paths


def _check_every_answer(client: TestClient, job: str, goodput: bool = True) -> dict[str, object]:
    answers = {}
    for path in _paths(client, job):
        resp = client.get(path)
        if not goodput and path.endswith("/goodput"):
            assert resp.status_code == 404  # this report has no goodput account
        else:
            assert resp.status_code == 200, (path, resp.status_code, resp.text[:300])
        if resp.headers["content-type"].startswith("application/json"):
            answers[path] = strict_loads(resp.content)
    assert {"/api/v1/jobs", f"/api/v1/jobs/{job}"} <= set(answers)
    assert not goodput or f"/api/v1/jobs/{job}/goodput" in answers
    return answers


def test_the_api_answers_every_path_in_strict_json_with_huge_counters(huge_recording) -> None:
    result = live_result(analyze_file(huge_recording))
    app = create_app(ServiceSettings(run_analysis=False), ScriptedAnalyze(result))
    assert app.state.runner.run_once()
    _check_every_answer(TestClient(app), "4711")


def test_non_finite_numbers_anywhere_in_a_report_are_null_with_a_note() -> None:
    """The last guard: whatever reaches the view non-finite is null, and the answer says so."""
    report = make_analysis()
    job = next(iter(report.jobs.values()))
    job.mfu, job.tokens_per_second = math.inf, math.nan
    report.findings[0].score = -math.inf
    # a value no view helper rounds: the strict serializer's own guard
    jobs = {job.job_id: {"state": "running", "last_step": math.inf}}
    app = create_app(ServiceSettings(run_analysis=False), ScriptedAnalyze(LiveResult(report, jobs=jobs)))
    assert app.state.runner.run_once()
    answers = _check_every_answer(TestClient(app), job.job_id, goodput=False)
    jobs = answers["/api/v1/jobs"]
    assert isinstance(jobs, dict) and jobs["jobs"][0]["mfu"] is None
    assert jobs["jobs"][0]["last_step"] is None and jobs["notes"] == [strictjson.note(1)]
    findings = answers["/api/v1/findings"]
    assert isinstance(findings, dict) and any(f["score"] is None for f in findings["findings"])


def test_strict_dumps() -> None:
    assert strictjson.dumps({"a": 1.5}) == '{"a": 1.5}'
    doc = strict_loads(strictjson.dumps({"a": [math.nan, 1.0, (math.inf,)], "b": {"c": -math.inf}}))
    assert doc == {"a": [None, 1.0, [None]], "b": {"c": None}, "notes": [strictjson.note(3)]}
    assert strict_loads(strictjson.dumps([np.float64("inf")])) == [None]


def test_impossible_increases_are_left_out_and_counted() -> None:
    times = np.arange(0.0, 600.0, 60.0)
    raw = np.array([[60.0 * i, 30.0 * i] for i in range(len(times))])
    raw[5, 0] = HUGE
    raw[7, 1] = -5.0  # negative after a reset: impossible too
    rejected: dict[str, int] = {}
    d = physical_increase(raw, times, 1.0, rejected, "x")
    assert np.isnan(d[5, 0]) and np.isnan(d[7, 1]) and rejected == {"x": 2}
    assert d[1, 0] == 60.0 and d[2, 1] == 30.0
    # A whole long step ending in one interval is physical.
    raw2 = np.array([[0.0], [MAX_STEP_S / 2]])
    assert physical_increase(raw2, np.array([0.0, 60.0]), 1.0, rejected, "y")[1, 0] == MAX_STEP_S / 2
