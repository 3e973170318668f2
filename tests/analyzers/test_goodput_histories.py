"""The goodput account on histories the real training library writes (fake clock, no simulator):
restarts resuming from checkpoints before and inside the window, async saves, slow loads, pauses
longer than a scrape, unreported pauses, hangs then aborts, whole-node crashes, pipeline jobs,
nodes scraped at their own offsets every 15-30 s with jitter and missed scrapes. Each category
within 2 percentage points of the job's GPU-hours, the productive share within 1."""

from __future__ import annotations

import math

import pytest

from fleetscope.analyzers.core import analyze_file
from fleetscope.analyzers.report import GOODPUT_CATEGORIES
from fleetscope.analyzers.report_text import render_text
from tests.analyzers.goodput_histories import History


def _resumed_before_and_inside(h: History) -> History:
    """A run that resumed before the window (its rework done before it, which no counter in the
    window could show) fails inside it; the next run fails again."""
    h.run_for(500).save(30).run_for(300).fail(120)  # before the window: resumes from the save
    h.run_for(400).save(30).run_for(600).fail(240, down_s=120)  # its rework is from the 2nd save
    return h.run_for(700).save(30).run_for(350).fail(90).run_for(600)


def _async_slow_load_pauses(h: History) -> History:
    """Async saves (a 2 s blocking part), evaluations longer than a scrape, reported or not, and a
    restart whose checkpoint load takes 3 minutes."""
    h.run_for(400).save(2).run_for(400).evaluate(150).run_for(300).save(2).run_for(200)
    h.evaluate(100, reported=False).run_for(300).fail(180, load_s=180).run_for(500).save(2)
    return h.run_for(300).evaluate(140).run_for(200)


def _node_crash_then_hang(h: History) -> History:
    """A whole node crashes (its ranks gone at once, the others hang until the abort), later a
    hang, then an abort: two failures."""
    h.run_for(600).save(45).run_for(400).fail(200, node=2).run_for(700).save(45)
    return h.run_for(300).fail(400).run_for(600)


def _fresh_restart(h: History) -> History:
    """A failure before the first save: the new run starts from step 0, everything is rework."""
    return h.run_for(500).fail(100).run_for(900).save(30).run_for(300)


HISTORIES = {
    "fresh_restart": (dict(nodes=4, seed=17), _fresh_restart, 1),
    "resumed_before_and_inside": (dict(nodes=4, seed=11, window_start=1600.0), _resumed_before_and_inside, 2),
    "async_slow_load_pauses": (dict(nodes=6, seed=12), _async_slow_load_pauses, 1),
    "node_crash_then_hang": (dict(nodes=8, seed=13, miss=0.03), _node_crash_then_hang, 2),
    "pipeline": (dict(nodes=8, seed=14, pipeline_stages=4, scrape=(15.0, 15.0)), _node_crash_then_hang, 2),
}


@pytest.mark.parametrize("name", sorted(HISTORIES))
def test_account_within_bounds_on_library_histories(name, tmp_path):
    kwargs, script, restarts = HISTORIES[name]
    h = script(History(**kwargs))
    path = tmp_path / f"{name}.om"
    h.write(path)
    a = analyze_file(path).goodput["4711"]
    truth = h.truth(a.start, a.end)
    whole = a.whole_gpu_seconds
    assert math.isclose(sum(a.gpu_seconds.values()), whole, rel_tol=1e-9)
    assert abs(whole - sum(truth.values())) <= 0.01 * whole, (whole, sum(truth.values()))
    errors = {k: (a.gpu_seconds[k] - truth[k]) / whole for k in GOODPUT_CATEGORIES}
    assert all(abs(e) <= 0.02 for e in errors.values()), errors
    assert abs(errors["productive"]) <= 0.01, errors
    assert a.restarts == restarts


def test_a_grid_finer_than_the_scrapes_gives_the_same_account(tmp_path):
    """``serve --step 5`` over 15 s scrapes: the grid times between samples are no restart and no
    stall (the demo page once showed a restart before any fault); the account is analyze's."""
    h = History(nodes=4, seed=15, scrape=(15.0, 15.0), jitter_s=0.5, miss=0.0)
    h.run_for(600).save(30).run_for(500).fail(150).run_for(700)
    path = tmp_path / "fine.om"
    h.write(path)
    coarse = analyze_file(path).goodput["4711"]
    fine = analyze_file(path, step=5.0).goodput["4711"]
    assert coarse.restarts == fine.restarts == 1
    for k in GOODPUT_CATEGORIES:
        share = (
            fine.gpu_seconds[k] / fine.whole_gpu_seconds - coarse.gpu_seconds[k] / coarse.whole_gpu_seconds
        )
        assert abs(share) <= 0.01, (k, share)
    truth = h.truth(fine.start, fine.end)
    for k in GOODPUT_CATEGORIES:
        assert abs(fine.gpu_seconds[k] - truth[k]) <= 0.02 * fine.whole_gpu_seconds, k


def test_report_says_when_the_advice_rests_on_the_prior(tmp_path):
    h = History(nodes=4, seed=16)
    h.run_for(600).save(30).run_for(600).save(30).run_for(600).save(30).run_for(300)
    path = tmp_path / "quiet.om"
    h.write(path)
    report = analyze_file(path)
    adv = report.goodput["4711"].advice
    assert adv is not None and adv.prior and adv.failures == 0
    assert adv.mtbf_s == pytest.approx(250 * 24 * 3600 / 4, rel=1e-6)
    assert "no failure in the window: the prior, 1 per 250 node-days" in render_text(report)
