"""The watcher prints each finding and firing alert once; the watch loop ends as it should."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

from fleetscope.demo.processes import Processes
from fleetscope.demo.watcher import Watcher, describe_alert, describe_finding, watch

FINDING = {
    "kind": "failing_node",
    "severity": "critical",
    "node": "node-1",
    "gpu": "3",
    "rank": None,
    "job_id": None,
    "cause": "gpu_lost",
    "action": "drain now",
}
ALERT = {
    "fingerprint": "abc",
    "status": {"state": "active"},
    "labels": {"alertname": "FleetscopeGpuLost", "severity": "critical", "Hostname": "node-1", "gpu": "3"},
    "annotations": {"summary": "GPU 3 fell off the bus"},
}


def test_descriptions_name_only_what_is_known() -> None:
    assert describe_finding(FINDING) == (
        "FINDING failing_node (critical) node=node-1 gpu=3 cause=gpu_lost: drain now"
    )
    assert describe_alert(ALERT) == (
        "ALERT FleetscopeGpuLost (critical) firing Hostname=node-1 gpu=3: GPU 3 fell off the bus"
    )


def test_each_finding_and_active_alert_is_printed_once(capsys: pytest.CaptureFixture[str]) -> None:
    w = Watcher(None, None)
    w.new_findings([FINDING, dict(FINDING, start="later")])  # same kind, place and cause: once
    w.new_findings([dict(FINDING, node="node-2")])
    w.new_alerts([ALERT, ALERT, dict(ALERT, fingerprint="def", status={"state": "suppressed"})])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("] ", 1)[1].split(" cause=")[0] for line in lines] == [
        "FINDING failing_node (critical) node=node-1 gpu=3",
        "FINDING failing_node (critical) node=node-2 gpu=3",
        "ALERT FleetscopeGpuLost (critical) firing Hostname=node-1 gpu=3: GPU 3 fell off the bus",
    ]


def test_watch_stops_at_the_duration(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    polls = []
    started = time.monotonic()
    rc = watch(Processes(tmp_path), threading.Event(), lambda: polls.append(1), 0.05, 0.3, started)
    assert rc == 0
    assert 0.3 <= time.monotonic() - started < 5
    assert len(polls) >= 2
    assert "--duration 0.3s reached" in capsys.readouterr().out


def test_watch_reports_a_dead_child_with_its_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    procs = Processes(tmp_path)
    child = procs.start("sim", [sys.executable, "-c", "print('boom'); raise SystemExit(3)"])
    child.proc.wait(timeout=30)
    try:
        assert watch(procs, threading.Event(), lambda: None, 0.05) == 1
    finally:
        procs.stop_all()
    out = capsys.readouterr()
    assert "sim exited unexpectedly (code 3)" in out.out
    assert "boom" in out.err


def test_watch_returns_0_once_stopped(tmp_path: Path) -> None:
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    assert watch(Processes(tmp_path), stop, lambda: None, 0.05) == 0
