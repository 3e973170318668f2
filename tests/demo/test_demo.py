"""``fleetscope demo`` end to end, as a user runs it: a subprocess starting the simulated cluster, a
real Prometheus with the generated rules, a real Alertmanager and the live service. The injected
fault must show up as a finding in the service's API and as a firing alert in Alertmanager, and
the demo must stop by itself at ``--duration`` with exit code 0, leaving no process behind."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

from fleetscope.demo.links import NO_WEB_UI
from fleetscope.simulate.spec import node_name
from tests.support.prom import free_port, wait_for

pytestmark = [pytest.mark.server]

VENV_BIN = Path(sys.executable).parent
FAULT_NODE = 1
DURATION = 105  # s: start (~10 s) + fault at 5 s + FleetscopeGpuLost's `for: 1m` + margin
START_TIMEOUT = 120.0  # s: each of the demo's four processes may take up to its own 60 s to be ready


class Demo:
    """The demo as a subprocess, its stdout collected line by line."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [str(VENV_BIN / "fleetscope"), "demo", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.descendants: set[int] = set()

    def _read(self) -> None:
        assert self.proc.stdout
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_started(self, text: str = "web page:", timeout: float = START_TIMEOUT) -> None:
        """Wait for the demo's ``text`` line; fail at once, with everything it printed, if it exits
        first or never prints it (a busy CI machine starts the four processes slowly)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.saw(text):
                return
            if self.proc.poll() is not None:
                self.reader.join(timeout=5)
                if self.saw(text):
                    return
                raise AssertionError(
                    f"the demo exited ({self.proc.returncode}) before {text!r}:\n{self.output()}"
                )
            time.sleep(0.2)
        raise AssertionError(f"no {text!r} from the demo within {timeout:g} s:\n{self.output()}")

    def saw(self, text: str) -> bool:
        self.remember_children()
        return any(text in line for line in self.lines)

    def remember_children(self) -> None:
        try:
            self.descendants |= {c.pid for c in psutil.Process(self.proc.pid).children(recursive=True)}
        except psutil.NoSuchProcess:
            pass

    def leftovers(self) -> list[str]:
        alive = []
        for pid in self.descendants:
            try:
                p = psutil.Process(pid)
                if p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(" ".join(p.cmdline()))
            except psutil.NoSuchProcess:
                continue
        return alive

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for pid in self.descendants:
            try:
                psutil.Process(pid).kill()
            except psutil.NoSuchProcess:
                pass


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=3) as resp:
        return json.loads(resp.read())


def _page(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.read().decode("utf-8", "replace")
    except OSError:
        return None


def test_demo_shows_the_fault_as_finding_and_firing_alert(tmp_path: Path) -> None:
    service, prometheus, alertmanager = free_port(), free_port(), free_port()
    workdir = tmp_path / "demo"
    demo = Demo(
        "--duration",
        str(DURATION),
        "--fast",
        "--fault",
        "gpu_lost",
        "--fault-at",
        "5",
        "--fault-node",
        str(FAULT_NODE),
        "--listen",
        f"127.0.0.1:{service}",
        "--prometheus-port",
        str(prometheus),
        "--alertmanager-port",
        str(alertmanager),
        "--base-port",
        str(20000 + free_port() % 20000),
        "--workdir",
        str(workdir),
    )
    node = node_name(FAULT_NODE)
    try:
        demo.wait_started("watching;")
        assert demo.saw(f"http://127.0.0.1:{service}/")
        # Every address it printed opens with what setup.sh installs (Debian: /classic/alerts, and an
        # Alertmanager without its web application, whose JSON API is printed instead).
        urls = [u.rstrip(",") for line in demo.lines for u in re.findall(r"(?<!=)http://[^\s)]+", line)]
        assert any(f":{prometheus}/" in u and u.endswith("alerts") for u in urls), demo.output()
        assert any(f":{alertmanager}/" in u for u in urls), demo.output()
        for url in urls:  # the API answers 503 until the service's first cycle
            body = wait_for(lambda url=url: _page(url), timeout=60, interval=1, what=f"200 from {url}")
            assert NO_WEB_UI not in body, f"{url} is the page of a missing web UI"

        def finding() -> list[dict]:
            found = get_json(f"http://127.0.0.1:{service}/api/v1/findings?kind=failing_node")["findings"]
            return [f for f in found if f["node"] == node]

        (gpu_lost, *_) = wait_for(finding, timeout=DURATION - 15, interval=1, what="a failing_node finding")
        assert gpu_lost["severity"] == "critical"

        # The job's goodput account (serve --step 5 over 15 s scrapes, as the demo runs it) books no
        # restart or recovery that no finding explains: the page once showed one before any fault.
        def accounts() -> list[dict]:
            out = []
            for job in get_json(f"http://127.0.0.1:{service}/api/v1/jobs")["jobs"]:
                try:  # a job seen for a cycle or two has no account yet (404)
                    out.append(get_json(f"http://127.0.0.1:{service}/api/v1/jobs/{job['job_id']}/goodput"))
                except urllib.error.HTTPError as e:
                    if e.code != 404:
                        raise
            return [a["goodput"] for a in out]

        for g in wait_for(accounts, timeout=20, interval=1, what="a job's goodput account"):
            assert g["restarts"] <= 1, g
            restart_lines = [b for b in g["badput"] if b["category"] in ("recovery", "rework")]
            assert all(b["finding"] for b in restart_lines), g

        def firing() -> list[dict]:
            alerts = get_json(f"http://127.0.0.1:{alertmanager}/api/v2/alerts?active=true")
            return [
                a
                for a in alerts
                if a["labels"].get("alertname") == "FleetscopeGpuLost"
                and a["labels"].get("Hostname") == node
                and a["status"]["state"] == "active"
            ]

        (alert, *_) = wait_for(
            firing, timeout=DURATION - 5, interval=1, what="FleetscopeGpuLost in Alertmanager"
        )
        assert alert["labels"]["severity"] == "critical"
        # the demo printed both as they appeared
        wait_for(lambda: demo.saw("FINDING failing_node") and demo.saw("ALERT FleetscopeGpuLost"), timeout=15)
        demo.remember_children()
        assert len(demo.descendants) >= 4, demo.descendants  # simulator, alertmanager, prometheus, service

        # --duration ends it by itself, cleanly
        assert demo.proc.wait(timeout=DURATION + 30) == 0, demo.output()
        demo.reader.join(timeout=5)
        assert demo.saw(f"--duration {DURATION}s reached")
        assert not demo.leftovers(), demo.leftovers()
        assert (workdir / "prometheus.yml").is_file()  # --workdir is kept
    finally:
        demo.kill()


def test_demo_without_prometheus_still_finds_the_fault_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    """The fallback: the demo scrapes the virtual nodes itself and runs the analyzers over that."""
    demo = Demo(
        "--no-prometheus",
        "--fast",
        "--fault-at",
        "3",
        "--fault-node",
        str(FAULT_NODE),
        "--listen",
        f"127.0.0.1:{free_port()}",
        "--base-port",
        str(20000 + free_port() % 20000),
    )
    try:
        demo.wait_started("scraping the virtual nodes directly")
        wait_for(
            lambda: demo.saw(f"FINDING failing_node (critical) node={node_name(FAULT_NODE)}"),
            timeout=60,
            what="the fallback's finding",
        )
        demo.remember_children()
        demo.proc.send_signal(signal.SIGINT)
        assert demo.proc.wait(timeout=30) == 0, demo.output()
        demo.reader.join(timeout=5)
        assert demo.saw("stopped")
        assert not demo.leftovers(), demo.leftovers()
    finally:
        demo.kill()


def test_demo_says_when_its_duration_ends_before_the_fault(tmp_path: Path) -> None:
    demo = Demo(
        "--no-prometheus",
        "--duration",
        "3",
        "--fault-at",
        "90",
        "--listen",
        f"127.0.0.1:{free_port()}",
        "--base-port",
        str(20000 + free_port() % 20000),
    )
    try:
        assert demo.proc.wait(timeout=60) == 0, demo.output()
        demo.reader.join(timeout=5)
        assert demo.saw("--duration 3s ends before the gpu_lost fault at 90s"), demo.output()
    finally:
        demo.kill()


def test_demo_refuses_bad_arguments_in_one_line() -> None:
    for args, message in [
        (["--fault-node", "7", "--nodes", "4"], "--fault-node must be in 0..3"),
        (["--nodes", "1"], "--nodes must be at least 2"),
    ]:
        res = subprocess.run(
            [str(VENV_BIN / "fleetscope"), "demo", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert res.returncode != 0
        (line,) = res.stderr.strip().splitlines()
        assert line.startswith(f"fleetscope: error: {message}")
        assert "Traceback" not in res.stderr
