"""The realistic model's checkpoint and restart series (saves, loads, restart attempt, resumed-from
step, startup time), and the goodput account read from them against the simulated truth."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fleetscope import contract as c
from fleetscope.analyzers.evaluate import score_goodput
from fleetscope.simulate.jobs import CKPT_BYTES_PER_S, LOAD_SHARE, WARMUP_S
from fleetscope.simulate.record import ground_truth, simulate, write_openmetrics, write_scenario
from fleetscope.simulate.spec import FaultSpec, ScenarioSpec
from tests.support.analysis import analyze_file

SCENARIOS = Path(__file__).resolve().parents[1] / "fixtures" / "scenarios"


def _rank0(rec, metric: str, **match: str) -> tuple[np.ndarray, np.ndarray]:
    """(times, values) of rank 0's series of ``metric`` (the first matching key)."""
    labels = rec.labels[metric]
    for key, tv in rec.series_of(metric).items():
        d = dict(zip(labels, key, strict=True))
        if d["rank"] == "0" and all(d.get(k) == v for k, v in match.items()):
            return tv
    raise AssertionError(f"no rank 0 series of {metric}")


@pytest.fixture(scope="module")
def drained():
    """Two nodes, a save every 300 s, node 1 drained at 700 s: 120 s later the job restarts on node 0."""
    spec = ScenarioSpec(
        name="ck",
        family="goodput",
        nodes=2,
        seed=11,
        duration_s=1500,
        scrape_miss=0.0,
        checkpoint_every_s=300,
        checkpoint_s=30,
        faults=[FaultSpec(kind="node_drain", at_s=700, node=1, stall_s=120)],
    )
    return spec, simulate(spec)


def test_saves_loads_and_the_restart_as_the_library_reports_them(drained):
    spec, rec = drained
    t0 = spec.start
    ok_t, ok = _rank0(rec, c.TRAINING_CHECKPOINT_SAVES, result="success")
    _, failed = _rank0(rec, c.TRAINING_CHECKPOINT_SAVES, result="failure")
    assert not failed.any()
    # Saves at 300 and 600 s in the first run; the restarted run's counters start from zero (at
    # ~820 s, after the drain) and count its saves at 900 and 1200 s.
    assert ok[ok_t < t0 + 700].max() == 2
    after = ok[ok_t > t0 + 700]
    assert after[0] == 0 and after[-1] == 2
    _, nbytes = _rank0(rec, c.TRAINING_CHECKPOINT_SAVE_BYTES)
    assert nbytes[-1] == pytest.approx(2 * CKPT_BYTES_PER_S * spec.checkpoint_s / spec.gpus_per_node)
    _, save_s = _rank0(rec, c.TRAINING_CHECKPOINT_SAVE_SECONDS)
    assert 2 * 0.9 * spec.checkpoint_s <= save_s[-1] <= 2 * 1.1 * spec.checkpoint_s
    # The restarted run: attempt 1, resumed from the step the last save held, one load.
    _, attempt = _rank0(rec, c.TRAINING_RESTART_ATTEMPT)
    assert attempt[0] == 0 and attempt[-1] == 1
    step_t, last_step = _rank0(rec, c.TRAINING_CHECKPOINT_LAST_SUCCESS_STEP)
    saved_before = float(last_step[step_t < t0 + 700][-1])
    res_t, resumed = _rank0(rec, c.TRAINING_RESUMED_FROM_STEP)
    assert res_t[0] > t0 + 700 and set(resumed.tolist()) == {saved_before}
    ts_t, last_ts = _rank0(rec, c.TRAINING_CHECKPOINT_LAST_SUCCESS_TIMESTAMP)
    assert t0 + 600 < last_ts[ts_t < t0 + 700][-1] < t0 + 700  # the second save ended before the drain
    _, loads = _rank0(rec, c.TRAINING_CHECKPOINT_LOADS)
    _, load_s = _rank0(rec, c.TRAINING_CHECKPOINT_LOAD_SECONDS)
    assert loads[-1] == 1 and load_s[-1] == pytest.approx(LOAD_SHARE * spec.checkpoint_s)
    up_t, startup = _rank0(rec, c.TRAINING_STARTUP_SECONDS)
    first, restarted = startup[up_t < t0 + 700], startup[up_t > t0 + 700]
    assert 20 < first[0] < 30  # the first run's 20 s warmup and a step
    assert WARMUP_S < restarted[0] < WARMUP_S + 10  # the restart's warmup (with its load) and a step
    # The truth counts the load as checkpoint time: saves and loads of every GPU (16 before the
    # drain, 8 after it: the job restarts shrunk to the node left).
    truth = ground_truth(spec, rec.goodput)["goodput"][spec.job_id]["gpu_seconds"]
    first_run = 16 * float(save_s[ok_t < t0 + 700].max())
    assert truth["checkpoint"] == pytest.approx(first_run + 8 * float(save_s[-1] + load_s[-1]), rel=1e-4)


def test_the_account_reads_the_series_and_meets_the_truth(tmp_path: Path):
    """The goodput family's rework scenario: the account takes the saves, the load and the resumed-
    from step from the series, and every category is within 2% of the job's GPU-hours of the truth;
    without the load series the load is missing from its checkpoint time."""
    spec = ScenarioSpec.load(SCENARIOS / "goodput_4n_s181_rework.json")
    out, truth_path = write_scenario(spec, tmp_path / "rw.om")
    truth = json.loads(truth_path.read_text())
    report = analyze_file(out)
    acct = report.goodput[spec.job_id]
    assert acct.inputs == {"checkpoint_telemetry": True, "global_step": True}
    assert acct.restarts == 1
    errors = score_goodput(truth, report.goodput)[spec.job_id]
    assert max(abs(e) for e in errors.values()) < 0.02, errors
    # The same recording without the load seconds: the load is no longer checkpoint time.
    text = out.read_text()
    family = c.TRAINING_CHECKPOINT_LOAD_SECONDS.removesuffix("_total")
    kept = [ln for ln in text.splitlines(keepends=True) if family not in ln]
    assert len(kept) < len(text.splitlines())
    bare = tmp_path / "no_loads.om"
    bare.write_text("".join(kept))
    without = analyze_file(bare).goodput[spec.job_id]
    loads = truth["goodput"][spec.job_id]["gpu_seconds"]["checkpoint"] - without.gpu_seconds["checkpoint"]
    assert loads > 0.5 * LOAD_SHARE * 45.0 * 24  # most of the load of the 24 surviving GPUs
    assert acct.gpu_seconds["checkpoint"] > without.gpu_seconds["checkpoint"] + 0.5 * loads


def test_a_job_without_training_telemetry_writes_no_checkpoint_series(tmp_path: Path):
    spec = ScenarioSpec(
        name="quiet", family="realistic", nodes=2, seed=5, duration_s=300, training_telemetry=False
    )
    rec = simulate(spec)
    write_openmetrics(rec, tmp_path / "q.om")
    assert c.TRAINING_CHECKPOINT_SAVES not in rec.metric_names()
    assert "training_restart_attempt" not in (tmp_path / "q.om").read_text()
