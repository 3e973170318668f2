"""The analysis in a child process: results and errors come back; a dead child is one failed cycle."""

from __future__ import annotations

import os
import time

import pytest

from fleetscope.errors import FleetscopeError
from fleetscope.service.isolate import ProcessAnalyze
from fleetscope.service.runner import AnalysisRunner
from fleetscope.service.state import VerdictStore
from tests.service import support
from tests.support.prom import wait_for


def test_child_process_results_errors_and_death():
    analyze = ProcessAnalyze(support.analyze_small)
    try:
        a = analyze(1_796_000_000.0, 1_796_001_800.0).report
        assert a.nodes["node-2"].state == "failing" and a.start == 1_796_000_000.0
        pid = analyze.pid
        assert pid and pid != os.getpid()  # it really ran elsewhere

        analyze.fn = support.analyze_refuses
        with pytest.raises(FleetscopeError, match="answered 503"):
            analyze(0.0, 1.0)

        assert analyze.pid == pid  # an error does not cost the child

        analyze.fn = support.analyze_dies
        with pytest.raises(FleetscopeError, match="analysis process died"):
            analyze(0.0, 1.0)

        analyze.fn = support.analyze_small  # the next cycle starts a fresh child
        assert analyze(5.0, 6.0).report.end == 6.0
        assert analyze.pid not in (None, pid)
    finally:
        analyze.close()


def test_runner_survives_a_dying_analysis_process():
    store = VerdictStore(100)
    analyze = ProcessAnalyze(support.analyze_dies)
    runner = AnalysisRunner(store, analyze, interval=1, window=60)
    try:
        assert not runner.run_once()
        assert "analysis process died" in store.snapshot().error
        analyze.fn = support.analyze_small
        assert runner.run_once() and store.snapshot().ready
    finally:
        runner.stop()
    assert analyze.pid is None  # stop() ended the child


def test_stop_ends_a_child_in_the_middle_of_a_cycle():
    analyze = ProcessAnalyze(support.analyze_hangs)
    runner = AnalysisRunner(VerdictStore(100), analyze, interval=1, window=60)
    runner.start()
    wait_for(lambda: analyze.pid, timeout=30, what="the child to start")
    pid = analyze.pid
    t0 = time.monotonic()
    runner.stop()
    assert time.monotonic() - t0 < 5
    assert not _alive(pid)


def test_child_exits_when_the_service_is_killed(tmp_path):
    """SIGKILL of the service (no chance to clean up): its analysis child goes too."""
    import subprocess
    import sys

    code = (
        f"import sys, time; sys.path.insert(0, {str(support.ROOT)!r})\n"
        "from fleetscope.service.isolate import ProcessAnalyze\n"
        "from tests.service import support\n"
        "a = ProcessAnalyze(support.analyze_hangs)\n"
        "import threading; threading.Thread(target=a, args=(0.0, 1.0), daemon=True).start()\n"
        "while a.pid is None: time.sleep(0.05)\n"
        "print(a.pid, flush=True); time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        assert _alive(child)
        parent.kill()
        parent.wait()
        wait_for(lambda: not _alive(child), timeout=10, what="the orphaned child to exit")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_the_child_keeps_its_analysis_and_its_state_between_calls():
    """What the analysis keeps between cycles (a sliding source's window) stays in the child."""
    analyze = ProcessAnalyze(support.CountingAnalysis())
    try:
        assert [analyze(1_796_000_000.0, 0.0).end for _ in range(3)] == [1.0, 2.0, 3.0]
        analyze.fn = support.CountingAnalysis()  # a new function starts from its own state
        assert analyze(1_796_000_000.0, 0.0).end == 1.0
    finally:
        analyze.close()
