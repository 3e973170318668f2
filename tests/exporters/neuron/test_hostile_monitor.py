"""A neuron-monitor that misbehaves in ways the supervisor must survive, for real: small scripts
run as the monitor child process, the exporter scraped over HTTP, its processes checked in /proc."""

from __future__ import annotations

import signal
import sys
import threading
import time
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetscope import contract as c
from fleetscope.exporters import neuron_source
from fleetscope.exporters.neuron_source import FileFollower, _Lines, find_monitor
from tests.exporters.neuron.conftest import FAIL, NEURON, OK, exporter, scrape_until
from tests.support import exposition
from tests.support.prom import wait_for

REPORT = (NEURON / "inf2.jsonl").read_text().splitlines()[0]


def _monitor(tmp_path: Path, body: str) -> Path:
    """An executable Python script standing in for neuron-monitor; ``REPORT`` is one good report."""
    path = tmp_path / "monitor"
    path.write_text(f"#!{sys.executable}\nimport os, sys, time\nREPORT = {REPORT!r}\n{body}\n")
    path.chmod(0o755)
    return path


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _pids(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.exists() else []


@pytest.mark.slow
@pytest.mark.server  # a real fleetscope exporter process
def test_a_monitor_that_closes_its_output_but_keeps_running_is_restarted(tmp_path: Path) -> None:
    monitor = _monitor(tmp_path, "print(REPORT, flush=True)\nos.close(1)\ntime.sleep(3600)")
    with exporter(f"--collector.neuron.monitor-path={monitor}", tmp_path=tmp_path) as exp:
        text = scrape_until(exp, 'reason="hung"} 1.0', timeout=30)
        log = exp.log()
    assert "closed its output but was still running 5 s later (hung)" in log
    assert exposition.value(text, str(c.NEURON_MONITOR_RESTARTS), reason="hung") == 1


@pytest.mark.server  # a real fleetscope exporter process
def test_the_monitors_last_stderr_lines_are_in_the_log_and_the_failure(tmp_path: Path) -> None:
    body = (
        "for i in range(5): print(f'line {i}', file=sys.stderr)\n"
        "print('ERROR: failed to open /dev/neuron0: Permission denied', file=sys.stderr, flush=True)\n"
        "sys.exit(2)"
    )
    monitor = _monitor(tmp_path, body)
    with exporter(f"--collector.neuron.monitor-path={monitor}", tmp_path=tmp_path) as exp:
        text = scrape_until(exp, 'reason="exited"} 1.0')
        wait_for(
            lambda: "collector neuron failed" in exp.log() and "Permission denied" in exp.log(), timeout=10
        )
        log = exp.log()
    # The supervisor's line for the exit carries the stderr tail (the registry's own failure line,
    # logged once, names the exit only).
    exits = [line for line in log.splitlines() if "exited with status 2" in line]
    assert any(
        "its stderr ended: line 3 | line 4 | ERROR: failed to open /dev/neuron0: Permission denied" in line
        for line in exits
    ), exits
    # While failing, the collector still serves its restarts and counts why it failed.
    assert FAIL in text
    assert exposition.value(text, str(c.COLLECTOR_ERRORS), collector="neuron", reason="no_report") >= 1
    assert "Traceback" not in log


@pytest.mark.server  # a real fleetscope exporter process
def test_a_last_report_without_newline_is_read(tmp_path: Path) -> None:
    monitor = _monitor(tmp_path, "sys.stdout.write(REPORT)\nsys.stdout.flush()\ntime.sleep(0.2)\nsys.exit(0)")
    with exporter(f"--collector.neuron.monitor-path={monitor}", tmp_path=tmp_path, node="inf2-0") as exp:
        text = scrape_until(exp, OK)
    assert exposition.value(text, str(c.NEURON_EXECUTION_STATUS), status_type="completed") >= 120


@pytest.mark.slow
@pytest.mark.server  # a real fleetscope exporter process
def test_a_daemonizing_monitor_leaves_no_orphans(tmp_path: Path) -> None:
    """Each start forks a child that keeps the pipe and sleeps; the parent exits."""
    pids = tmp_path / "pids"
    body = (
        f"if os.fork() == 0:\n    open({str(pids)!r}, 'a').write(f'{{os.getpid()}}\\n')\n"
        "    time.sleep(3600)\nos._exit(0)"
    )
    monitor = _monitor(tmp_path, body)
    flags = (f"--collector.neuron.monitor-path={monitor}", "--collector.neuron.hang-after=0.5")
    with exporter(*flags, tmp_path=tmp_path):
        wait_for(lambda: len(_pids(pids)) >= 3, timeout=30, what="three starts")
        older = _pids(pids)[:-1]
        wait_for(lambda: not any(_alive(p) for p in older), timeout=10, what="earlier daemons gone")
    wait_for(lambda: not any(_alive(p) for p in _pids(pids)), timeout=10, what="no daemon after stop")


@pytest.mark.server  # a real fleetscope exporter process
def test_the_monitor_dies_with_a_sigkilled_exporter(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    body = (
        f"open({str(pids)!r}, 'a').write(f'{{os.getpid()}}\\n')\nwhile True:\n    print(REPORT, "
        "flush=True)\n    time.sleep(0.1)"
    )
    monitor = _monitor(tmp_path, body)
    exp = exporter(f"--collector.neuron.monitor-path={monitor}", tmp_path=tmp_path).start()
    try:
        scrape_until(exp, OK)
        (pid,) = _pids(pids)
        assert exp.proc is not None
        exp.proc.send_signal(signal.SIGKILL)
        exp.proc.wait(timeout=10)
        wait_for(lambda: not _alive(pid), timeout=10, what="the monitor gone with its parent")
    finally:
        exp.stop()


@pytest.mark.server  # a real fleetscope exporter process
def test_sigterm_while_reading_stops_cleanly(tmp_path: Path) -> None:
    body = "while True:\n    print(REPORT, flush=True)\n    time.sleep(0.01)"
    monitor = _monitor(tmp_path, body)
    exp = exporter(f"--collector.neuron.monitor-path={monitor}", tmp_path=tmp_path).start()
    scrape_until(exp, OK)
    start = time.monotonic()
    code = exp.stop()
    assert code == 0 and time.monotonic() - start < 10
    assert "Traceback" not in exp.log() and "shutting down" in exp.log()


def test_neuron_monitor_is_found_in_the_neuron_bin_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monitor = tmp_path / "neuron-monitor"
    monitor.write_text("#!/bin/sh\n")
    monitor.chmod(0o755)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setattr(neuron_source, "NEURON_BIN", str(tmp_path))
    assert find_monitor("neuron-monitor") == str(monitor)
    assert find_monitor("/explicit/neuron-monitor") == "/explicit/neuron-monitor"
    monkeypatch.setattr(neuron_source, "NEURON_BIN", str(tmp_path / "absent"))
    assert find_monitor("neuron-monitor") == "neuron-monitor"  # then Popen says it is missing


# ---- the reader thread ----------------------------------------------------------------------------


def _follow(path: Path, on_line) -> FileFollower:
    return FileFollower(path, on_line, poll_s=0.02)


@pytest.mark.parametrize("path", ["dir", "/dev/urandom", "/dev/zero"])
def test_a_report_file_that_is_no_file_is_refused(tmp_path: Path, path: str) -> None:
    target = tmp_path if path == "dir" else Path(path)
    lines: list[bytes] = []
    before = time.process_time()
    follower = _follow(target, lambda line: bool(lines.append(line)))
    try:
        wait_for(lambda: follower.last_problem, timeout=5, what="a problem")
        time.sleep(0.5)
        assert follower.last_problem.endswith("not a regular file or FIFO")
        assert follower._thread.is_alive() and lines == []
    finally:
        follower.close()
    assert time.process_time() - before < 0.5  # no core spun on it


def test_the_reader_survives_a_callback_that_raises(tmp_path: Path) -> None:
    path = tmp_path / "reports"
    path.write_text("boom\nfine\n")
    seen: list[bytes] = []

    def on_line(line: bytes) -> bool:
        if line == b"boom":
            raise RecursionError("maximum recursion depth exceeded")
        seen.append(line)
        return True

    follower = _follow(path, on_line)
    try:
        wait_for(lambda: seen == [b"fine"], timeout=5, what="the line after the bad one")
        with path.open("a") as f:
            f.write("later\n")
        wait_for(lambda: seen == [b"fine", b"later"], timeout=5, what="a later line")
        assert follower._thread.is_alive()
    finally:
        follower.close()


def test_an_endless_line_costs_linear_time() -> None:
    lines = _Lines(limit=16 << 20)
    chunk = b"x" * (64 << 10)
    start = time.process_time()
    dropped = False
    for _ in range(1024):  # 64 MiB without a newline
        out, too_long = lines.feed(chunk)
        dropped |= too_long
        assert out == []
    out, _ = lines.feed(b"\nnext\n")
    assert time.process_time() - start < 3.0
    assert dropped and out == [b"next"]


@settings(max_examples=300, derandomize=True, deadline=None)
@given(data=st.binary(max_size=200), cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=8))
def test_lines_split_the_same_whatever_the_chunking(data: bytes, cuts: list[int]) -> None:
    """However the stream is cut into reads, the lines are those of the whole (blank ones dropped,
    any longer than the limit dropped whole), and a last line without newline waits for one."""
    limit = 16
    bounds = [0, *sorted(c for c in cuts if c <= len(data)), len(data)]
    lines, got, dropped = _Lines(limit=limit), [], False
    for a, b in pairwise(bounds):
        out, too_long = lines.feed(data[a:b])
        got += out
        dropped |= too_long
    *complete, rest = data.split(b"\n")
    want = [line for line in complete if line.strip() and len(line) <= limit]
    assert got == want
    assert dropped == any(len(line) > limit for line in data.split(b"\n"))
    tail = lines.feed(b"\n")[0]
    assert tail == ([rest] if rest.strip() and len(rest) <= limit else [])


def test_a_thread_count_stays_flat_over_restarts(tmp_path: Path) -> None:
    """The supervisor restarts the child, never its own thread."""
    from fleetscope.exporters.neuron_source import Supervisor

    monitor = _monitor(tmp_path, "sys.exit(1)")
    sup = Supervisor([str(monitor)], lambda _line: True)
    try:
        before = threading.active_count()
        wait_for(lambda: sup.restarts["exited"] >= 2, timeout=10, what="two restarts")
        assert threading.active_count() == before
    finally:
        sup.close()
