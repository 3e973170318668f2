"""The analysis in a child process: results and errors come back; a dead child is one failed cycle."""

from __future__ import annotations

import os

import pytest

from fleetscope.errors import FleetscopeError
from fleetscope.service.isolate import ProcessAnalyze
from fleetscope.service.runner import AnalysisRunner
from fleetscope.service.state import VerdictStore
from tests.service import support


def test_child_process_results_errors_and_death():
    analyze = ProcessAnalyze(support.analyze_small)
    try:
        a = analyze(1_796_000_000.0, 1_796_001_800.0)
        assert a.nodes["node-2"].state == "failing" and a.start == 1_796_000_000.0
        pid = analyze._pool._processes and next(iter(analyze._pool._processes))
        assert pid and pid != os.getpid()  # it really ran elsewhere

        analyze.fn = support.analyze_refuses
        with pytest.raises(FleetscopeError, match="answered 503"):
            analyze(0.0, 1.0)

        analyze.fn = support.analyze_dies
        with pytest.raises(FleetscopeError, match="analysis process died"):
            analyze(0.0, 1.0)

        analyze.fn = support.analyze_small  # the next cycle starts a fresh child
        assert analyze(5.0, 6.0).end == 6.0
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
    assert analyze._pool is None  # stop() closed it
