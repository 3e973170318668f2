"""The goodput account on histories the real training library writes (fake clock, no simulator):
restarts resuming from checkpoints before and inside the window, async saves, slow loads, pauses
longer than a scrape, unreported pauses, hangs then aborts, whole-node crashes, pipeline jobs,
nodes scraped at their own offsets every 15-30 s with jitter and missed scrapes. Each category
within 2 percentage points of the job's GPU-hours, the productive share within 1."""

from __future__ import annotations

import math

import pytest

from fleetscope.analyzers.checkpoint_advice import daly
from fleetscope.analyzers.report import GOODPUT_CATEGORIES
from fleetscope.analyzers.report_text import render_text
from fleetscope.simulate.spec import node_name
from tests.analyzers.goodput_histories import History
from tests.support.analysis import analyze_file


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


def _crash_within_the_abort(h: History) -> History:
    """A whole node crashes and the watchdog aborts the others 20 s later: every rank is gone
    within a scrape or two, only the node's exporter, gone with it, says where it broke."""
    return h.run_for(600).save(45).run_for(400).fail(20, node=2).run_for(1200).save(45).run_for(300)


def _two_crashes(h: History) -> History:
    """Two whole-node crashes (nodes 2 and 5), each aborted within one to two minutes."""
    h.run_for(600).save(45).run_for(400).fail(60, node=2).run_for(700).save(45).run_for(300)
    return h.fail(120, node=5).run_for(600)


def _user_code_restart(h: History) -> History:
    """The processes fail (user code, OOM, a NaN loss): every rank exits at once, every exporter
    stays up with its GPUs idle, the scheduler requeues the job."""
    return h.run_for(600).save(45).run_for(400).fail(0).run_for(1200).save(45).run_for(300)


HISTORIES = {
    "fresh_restart": (dict(nodes=4, seed=17), _fresh_restart, 1),
    "resumed_before_and_inside": (dict(nodes=4, seed=11, window_start=1600.0), _resumed_before_and_inside, 2),
    "async_slow_load_pauses": (dict(nodes=6, seed=12), _async_slow_load_pauses, 1),
    "node_crash_then_hang": (dict(nodes=8, seed=13, miss=0.03), _node_crash_then_hang, 2),
    "pipeline": (dict(nodes=8, seed=14, pipeline_stages=4, scrape=(15.0, 15.0)), _node_crash_then_hang, 2),
    "crash_within_the_abort": (dict(nodes=8, seed=21, exporter=True), _crash_within_the_abort, 1),
    "two_crashes": (dict(nodes=8, seed=22, exporter=True, miss=0.03), _two_crashes, 2),
    "user_code_restart": (dict(nodes=8, seed=23, exporter=True), _user_code_restart, 1),
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


def _critical_nodes(report) -> list[str]:
    return sorted(
        str(f.node) for f in report.findings if f.kind == "failing_node" and f.severity == "critical"
    )


def _recovery_texts(acct) -> list[str]:
    return [i.text for i in acct.items if i.category == "recovery"]


@pytest.mark.parametrize("seed", [21, 24, 31])
def test_a_node_crash_within_the_abort_is_one_failure_that_names_the_node(seed, tmp_path):
    """Every rank is gone within the abort, so no rank went first; the node's exporter went with
    it while the others' stayed up: one critical failing node (node_down), one failure, and the
    advice is Daly's interval for the measured save cost and that one failure."""
    h = _crash_within_the_abort(History(nodes=8, seed=seed, exporter=True))
    path = tmp_path / "crash.om"
    h.write(path)
    report = analyze_file(path)
    crit = [f for f in report.findings if f.kind == "failing_node" and f.severity == "critical"]
    assert [(f.node, f.cause) for f in crit] == [(node_name(2), "node_down")]
    assert not [f for f in report.findings if f.kind == "membership_change"]
    a = report.goodput["4711"]
    adv = a.advice
    assert adv is not None and adv.failures == 1 and not adv.prior
    mtbf = h.last_scrape - h.first_scrape  # the job holds every node: one failure in the window
    want = daly(45.0, mtbf) + 45.0
    assert abs(adv.recommended_s - want) <= 0.05 * want, (adv.recommended_s, want)
    why = f"counted as a failure: failing_node node_down on {node_name(2)}"
    assert any(why in t for t in _recovery_texts(a)), _recovery_texts(a)


@pytest.mark.parametrize(("seed", "exporter"), [(22, True), (23, True), (29, False), (23, False)])
def test_two_failures_are_two_and_no_healthy_node_is_blamed(seed, exporter, tmp_path):
    """Two node crashes: two failures on the two nodes. Without the exporter's series only ranks
    that went first by a stall's length name a node: the nodes scraped last before an abort
    (healthy ones) are never blamed, so at most the two crashed nodes are named."""
    h = _two_crashes(History(nodes=8, seed=seed, exporter=exporter, miss=0.03))
    path = tmp_path / "two.om"
    h.write(path)
    report = analyze_file(path)
    named = _critical_nodes(report)
    crashed = [node_name(2), node_name(5)]
    assert set(named) <= set(crashed), named
    adv = report.goodput["4711"].advice
    assert adv is not None and adv.failures == len(named)
    if exporter:
        assert named == crashed
        assert adv.failures == 2


def test_a_user_code_restart_is_counted_apart_and_blames_no_node(tmp_path):
    """Every rank exits at once and every exporter stays up: a restart, no failure, no node."""
    h = _user_code_restart(History(nodes=8, seed=23, exporter=True))
    path = tmp_path / "user.om"
    h.write(path)
    report = analyze_file(path)
    assert not [f for f in report.findings if f.node is not None and f.severity != "info"]
    a = report.goodput["4711"]
    assert a.restarts == 1
    assert a.advice is not None and a.advice.failures == 0 and a.advice.prior
    assert any("not counted as a failure: no infrastructure cause" in t for t in _recovery_texts(a))


@pytest.mark.parametrize("script", [_crash_within_the_abort, _user_code_restart])
def test_failures_on_a_grid_finer_than_the_scrapes(script, tmp_path):
    """``serve --step 5`` over 15 s scrapes: every series is absent between its samples, which
    is neither a node going down nor a rank going first; the crash is still one failure on its
    node and the user-code restart none."""
    h = script(History(nodes=8, seed=6, exporter=True, scrape=(15.0, 15.0), jitter_s=0.5))
    path = tmp_path / "fine.om"
    h.write(path)
    report = analyze_file(path, step=5.0)
    crashed = script is _crash_within_the_abort
    assert _critical_nodes(report) == ([node_name(2)] if crashed else [])
    adv = report.goodput["4711"].advice
    assert adv is not None and adv.failures == int(crashed)
    assert report.goodput["4711"].restarts == 1
