"""The supervisor, for real: the fake neuron-monitor as a child process, scraped over HTTP.

A neuron-monitor that exits, hangs or prints garbage makes the collector fail with one clear log
line and is restarted; the scrape never waits for it; a sidecar's report file is followed.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fleetscope import contract as c
from tests.exporters.neuron.conftest import FAIL, NEURON, OK, exporter, monitor_config, scrape_until, starts
from tests.support import exposition
from tests.support.prom import wait_for

pytestmark = [pytest.mark.server]


def _restarts(text: str, reason: str) -> float:
    return exposition.value(text, str(c.NEURON_MONITOR_RESTARTS), reason=reason)


def test_an_exiting_monitor_is_restarted_and_served_again(tmp_path: Path) -> None:
    config = monitor_config(tmp_path, mode="exit", after=2, first_start_only=True)
    with exporter(f"--collector.neuron.config={config}", tmp_path=tmp_path) as exp:
        wait_for(lambda: starts(tmp_path) >= 2, timeout=20, what="a second start")
        text = scrape_until(exp, 'reason="exited"} 1.0')
        assert OK in text
        log = exp.log()
    assert _restarts(text, "exited") == 1 and _restarts(text, "hung") == 0
    lines = [line for line in log.splitlines() if "neuron-monitor exited with status 3" in line]
    assert len(lines) == 1 and "restarting it in 1 s" in lines[0]
    assert "Traceback" not in log


def test_a_hung_monitor_is_killed_and_restarted(tmp_path: Path) -> None:
    config = monitor_config(tmp_path, mode="hang", after=1, first_start_only=True)
    flags = (f"--collector.neuron.config={config}", "--collector.neuron.hang-after=0.5")
    with exporter(*flags, tmp_path=tmp_path) as exp:
        scrape_until(exp, 'reason="hung"} 1.0')
        wait_for(lambda: starts(tmp_path) >= 2, timeout=10, what="a second start")
        assert OK in scrape_until(exp, 'reason="hung"} 1.0')
        assert "printed no report for 0.5 s (hung)" in exp.log()


def test_garbage_restarts_the_monitor_and_is_counted(tmp_path: Path) -> None:
    config = monitor_config(tmp_path, mode="garbage", after=1, first_start_only=True)
    with exporter(f"--collector.neuron.config={config}", tmp_path=tmp_path) as exp:
        text = scrape_until(exp, 'reason="garbage"} 1.0')
        log = exp.log()
    errors = exposition.value(text, str(c.COLLECTOR_ERRORS), collector="neuron", reason="garbage")
    assert errors >= 3
    assert "3 lines in a row that are no report (garbage)" in log and "Traceback" not in log


def test_a_stale_report_fails_the_collector_without_blocking_the_scrape(tmp_path: Path) -> None:
    config = monitor_config(tmp_path, mode="hang", after=1)
    flags = (f"--collector.neuron.config={config}", "--collector.neuron.stale-after=0.5")
    with exporter(*flags, tmp_path=tmp_path) as exp:
        scrape_until(exp, OK)
        text = scrape_until(exp, FAIL)
        start = time.monotonic()
        again = exp.metrics()
        took = time.monotonic() - start
        log = exp.log()
    assert took < 1.0 and FAIL in again
    assert "neuroncore_utilization_ratio" not in text  # a stale report is not served
    assert "latest neuron-monitor report is" in log and "old (stale)" in log


def test_a_missing_monitor_fails_alone_with_one_clear_line(tmp_path: Path) -> None:
    with exporter("--collector.neuron.monitor-path=/nonexistent/neuron-monitor", tmp_path=tmp_path) as exp:
        text = scrape_until(exp, FAIL)
        log = exp.log()
    assert "fleetscope_exporter_build_info" in text
    assert "neuron-monitor cannot start /nonexistent/neuron-monitor: No such file or directory" in log
    assert "Traceback" not in log


def test_a_sidecars_report_file_is_followed(tmp_path: Path) -> None:
    reports = (NEURON / "inf2.jsonl").read_text().splitlines()
    path = tmp_path / "reports"
    path.write_text(reports[0] + "\n" + "garbage\n")
    with exporter(f"--collector.neuron.report-file={path}", tmp_path=tmp_path, node="inf2-0") as exp:
        first = scrape_until(exp, OK)
        with path.open("a") as f:
            f.write(reports[1] + "\n" + reports[2] + "\n")

        def counted() -> str | None:
            text = exp.metrics()
            return text if _completed(text) == 360 else None

        later = wait_for(counted, timeout=10, what="three reports counted")
    assert _completed(first) == 120
    assert exposition.value(later, str(c.NEURON_EXECUTION_ERRORS), error_type="hardware") == 1
    assert exposition.value(later, str(c.COLLECTOR_ERRORS), collector="neuron", reason="garbage") == 1


def _completed(text: str) -> float:
    return exposition.value(text, str(c.NEURON_EXECUTION_STATUS), status_type="completed")
