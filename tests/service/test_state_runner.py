"""Staleness and resilience of the verdict store and the analysis loop (scripted failures).

The same behaviour against a real Prometheus that stops and comes back is in test_prometheus_outage.
"""

from __future__ import annotations

import dataclasses
import logging
import threading

from fleetscope.errors import FleetscopeError
from fleetscope.service.live import LiveResult
from fleetscope.service.runner import AnalysisRunner
from fleetscope.service.state import VerdictStore
from tests.service.support import make_analysis, prometheus_down
from tests.support.prom import wait_for


class Clock:
    def __init__(self, t: float = 1_796_001_800.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_runner_analyzes_the_sliding_window_ending_now(scripted):
    clock = Clock()
    runner = AnalysisRunner(VerdictStore(100, clock), scripted, interval=30, window=1800, clock=clock)
    assert runner.run_once()
    clock.t += 30
    assert runner.run_once()
    assert scripted.calls == [(clock.t - 30 - 1800, clock.t - 30), (clock.t - 1800, clock.t)]


def test_failures_keep_the_last_verdicts_mark_them_stale_and_recover(scripted, caplog):
    clock = Clock()
    store = VerdictStore(stale_after=100, clock=clock)
    runner = AnalysisRunner(store, scripted, interval=30, window=1800, clock=clock)
    assert runner.run_once()
    good = store.snapshot()
    assert good.ready and not good.stale and good.error is None

    scripted.error = prometheus_down()
    with caplog.at_level(logging.WARNING, logger="fleetscope.service.runner"):
        for _ in range(3):
            clock.t += 30
            assert not runner.run_once()
    snap = store.snapshot()
    assert snap.analysis is good.analysis  # the verdicts are kept
    assert snap.stale and not snap.ready
    assert snap.age == 90 and "connection refused" in snap.error
    assert snap.failing_since == good.analyzed_at + 30
    outage_logs = [r for r in caplog.records if "analysis failed" in r.getMessage()]
    assert len(outage_logs) == 1  # once per outage, not every cycle

    scripted.error = None
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="fleetscope.service.runner"):
        clock.t += 30
        assert runner.run_once()
    snap = store.snapshot()
    assert snap.ready and snap.error is None and snap.failing_since is None and snap.age == 0
    assert any("recovered" in r.getMessage() for r in caplog.records)


def test_unexpected_errors_of_the_analyzers_do_not_stop_the_loop(scripted):
    store = VerdictStore(100)
    runner = AnalysisRunner(store, scripted, interval=0.01, window=60)
    scripted.error = ZeroDivisionError("division by zero")
    runner.start()
    try:
        wait_for(lambda: len(scripted.calls) >= 3, timeout=10, what="three failing cycles")
        assert store.snapshot().error == "ZeroDivisionError: division by zero"
        scripted.error = None
        wait_for(lambda: store.snapshot().ready, timeout=10, what="recovery")
    finally:
        runner.stop()


def test_verdicts_go_stale_with_age_even_without_a_failure(scripted):
    clock = Clock()
    store = VerdictStore(stale_after=100, clock=clock)
    AnalysisRunner(store, scripted, interval=30, window=1800, clock=clock).run_once()
    clock.t += 100
    assert not store.snapshot().stale
    clock.t += 1
    snap = store.snapshot()
    assert snap.stale and snap.error is None and snap.status()["age_seconds"] == 101


def test_slow_analysis_never_blocks_readers(scripted):
    """While a cycle hangs on a slow Prometheus, the store still answers with the last verdicts."""
    store = VerdictStore(100)
    runner = AnalysisRunner(store, scripted, interval=0.01, window=60)
    assert runner.run_once()
    scripted.gate = threading.Event()
    runner.start()
    try:
        wait_for(lambda: len(scripted.calls) >= 2, timeout=5, what="a second, hanging cycle")
        snap = store.snapshot()
        assert snap.analysis is scripted.result and snap.error is None
    finally:
        scripted.gate.set()
        runner.stop()


def test_a_finding_keeps_its_first_start_while_the_window_slides(scripted):
    store = VerdictStore(100)
    first = make_analysis()
    store.record_success(LiveResult(first))
    later = make_analysis(start=first.start + 1200, end=first.end + 1200)
    # The window moved past the problem's beginning: the detector now sees it start at the edge.
    later.findings = [dataclasses.replace(f, start=later.start) for f in later.findings]
    store.record_success(LiveResult(later))
    starts = {f.kind: f.start for f in store.snapshot().analysis.findings}
    assert starts == {"failing_node": first.start + 600, "straggler": first.start + 300}
    # A finding that went away and comes back starts afresh.
    gone = make_analysis(start=later.start + 30, end=later.end + 30, failing=())
    store.record_success(LiveResult(gone))
    back = make_analysis(start=gone.start + 30, end=gone.end + 30)
    store.record_success(LiveResult(back))
    assert {f.kind: f.start for f in store.snapshot().analysis.findings}["failing_node"] == back.start + 600


def test_api_marks_stale_verdicts_with_their_age(make_client, scripted):
    client = make_client(interval=30)
    runner = client.app.state.runner
    scripted.error = FleetscopeError("Prometheus answered 503")
    assert not runner.run_once()
    r = client.get("/api/v1/nodes")
    assert r.status_code == 200  # the last verdicts are still served...
    status = r.json()["status"]
    assert status["stale"] is True and status["ready"] is False  # ...marked stale, with their age
    assert status["last_error"] == "Prometheus answered 503" and status["age_seconds"] >= 0
    ready = client.get("/readyz")
    assert ready.status_code == 503 and ready.json()["last_error"] == "Prometheus answered 503"
    assert client.get("/healthz").status_code == 200
    scripted.error = None
    assert runner.run_once()
    assert client.get("/readyz").status_code == 200
