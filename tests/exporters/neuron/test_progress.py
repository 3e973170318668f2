"""The neuron monitor is supervised on progress, a complete report, not bytes (issue 36, item 6):
an endless line, a flood of blank lines and a report trickled a byte at a time restart it; a
monitor that daemonizes into its own session leaves no process behind; a stale report is one log
line, not one per scrape. Real child processes (small scripts), the reader thread for real."""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

import pytest

from fleetscope.exporters.base import Collector, CollectorFailed, NodeContext
from fleetscope.exporters.neuron_source import Supervisor
from fleetscope.exporters.registry import NodeCollector
from tests.support.prom import wait_for

GOOD = b"REPORT"


def _script(tmp_path: Path, body: str) -> list[str]:
    path = tmp_path / "monitor"
    path.write_text(f"#!{sys.executable}\nimport os, sys, time\n{body}\n")
    path.chmod(0o755)
    return [str(path)]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _supervise(argv: list[str], hang_after: float = 1.0) -> tuple[Supervisor, list[bytes]]:
    seen: list[bytes] = []

    def on_line(line: bytes) -> bool:
        seen.append(line[:16])
        return line == GOOD

    return Supervisor(argv, on_line, hang_after=hang_after), seen


@pytest.mark.parametrize(
    "body",
    [
        # one good report, then one line that never ends
        "print('REPORT', flush=True)\nwhile True:\n    sys.stdout.write('x' * 65536); sys.stdout.flush()",
        # one good report, then blank lines without end
        "print('REPORT', flush=True)\nwhile True:\n    sys.stdout.write('\\n' * 4096); sys.stdout.flush()",
        # a report a byte at a time, slower than the hang deadline
        "while True:\n    for b in 'REPORT\\n':\n"
        "        sys.stdout.write(b); sys.stdout.flush(); time.sleep(0.4)",
    ],
    ids=["endless-line", "blank-lines", "byte-trickle"],
)
def test_no_complete_report_in_time_restarts_the_monitor(tmp_path: Path, body: str) -> None:
    sup, _seen = _supervise(_script(tmp_path, body), hang_after=1.0)
    try:
        wait_for(lambda: sup.restarts["hung"] >= 1, timeout=15, what="a restart for no report")
        assert "printed no report for" in sup.last_problem and "(hung)" in sup.last_problem
    finally:
        sup.close()


def test_steady_reports_keep_the_monitor(tmp_path: Path) -> None:
    body = "while True:\n    print('REPORT', flush=True); time.sleep(0.1)"
    sup, seen = _supervise(_script(tmp_path, body), hang_after=1.0)
    try:
        wait_for(lambda: len(seen) >= 25, timeout=15, what="reports for 2.5 s")
        assert sum(sup.restarts.values()) == 0
    finally:
        sup.close()


def test_a_monitor_that_daemonizes_into_its_own_session_leaves_no_orphans(tmp_path: Path) -> None:
    """Each start double-forks a daemon (setsid: out of the child's process group) that keeps the
    output pipe and prints nothing; the parent exits. 4 orphans were left before."""
    pids = tmp_path / "pids"
    body = (
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        open({str(pids)!r}, 'a').write(f'{{os.getpid()}}\\n')\n"
        "        time.sleep(3600)\n"
        "    os._exit(0)\n"
        "os._exit(0)"
    )
    sup, _seen = _supervise(_script(tmp_path, body), hang_after=0.5)

    def daemons() -> list[int]:
        return [int(x) for x in pids.read_text().split()] if pids.exists() else []

    try:
        wait_for(lambda: len(daemons()) >= 3, timeout=30, what="three starts")
        older = daemons()[:-1]
        wait_for(lambda: not any(_alive(p) for p in older), timeout=10, what="earlier daemons gone")
    finally:
        sup.close()
    wait_for(lambda: not any(_alive(p) for p in daemons()), timeout=10, what="no daemon after close")


class _Stale(Collector):
    name = "stale"

    def __init__(self) -> None:
        super().__init__(NodeContext())
        self.fresh = False
        self.t0 = time.monotonic()

    def collect(self):
        if self.fresh:
            return []
        raise CollectorFailed(f"latest report is {time.monotonic() - self.t0 + 40:.1f} s old (stale)", [])


def test_a_stale_failure_is_logged_once_not_on_every_scrape(caplog) -> None:
    collector = _Stale()
    node = NodeCollector([collector])
    with caplog.at_level(logging.WARNING, logger="fleetscope.exporters.registry"):
        for _ in range(5):
            list(node.collect())
            time.sleep(0.02)
        assert sum("collector stale failed" in r.message for r in caplog.records) == 1
        collector.fresh = True
        list(node.collect())
        collector.fresh = False
        list(node.collect())  # failing again after a success: said again
    assert sum("collector stale failed" in r.message for r in caplog.records) == 2
