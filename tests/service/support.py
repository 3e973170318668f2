"""Helpers for the service tests: real Report objects, a scripted analysis function, the
``fleetscope serve`` process, headless Chromium, and a colour comparison for its screenshots."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from pathlib import Path

from fleetscope.analyzers.findings import Finding
from fleetscope.analyzers.report import JobSummary, NodeVerdict, Report, StragglerScore
from fleetscope.errors import FleetscopeError
from fleetscope.service.live import LiveResult
from tests.support.exporter import FleetscopeProcess
from tests.support.prom import free_port, http_get

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
#: The page's state colours (fleetscope/service/static/style.css).
COLOURS = {"healthy": (0x2E, 0x7D, 0x32), "degraded": (0xF9, 0xA8, 0x25), "failing": (0xC6, 0x28, 0x28)}


def make_analysis(
    start: float = 1_796_000_000.0,
    end: float = 1_796_001_800.0,
    n_nodes: int = 4,
    failing: tuple[str, ...] = ("node-2",),
    degraded: tuple[str, ...] = (),
    job_id: str = "4711",
    gpus: int = 8,
) -> Report:
    """A small cluster: ``n_nodes`` nodes of ``gpus`` GPUs, one job on all of them, rank 5 a straggler."""
    a = Report(start=start, end=end)
    for i in range(1, n_nodes + 1):
        name = f"node-{i}"
        state = "failing" if name in failing else "degraded" if name in degraded else "healthy"
        gpu_states = {str(g): "healthy" for g in range(gpus)}
        reasons: list[str] = []
        if state == "failing":
            gpu_states["3"] = "failing"
            reasons = ["GPU 3 fell off the bus (XID 79)"]
            a.findings.append(
                Finding(
                    kind="failing_node",
                    severity="critical",
                    node=name,
                    gpu="3",
                    start=start + 600,
                    cause="gpu_lost",
                    evidence={"fleetscope_gpu_up": "1 -> 0", "xid": "79"},
                    action="drain now",
                )
            )
        elif state == "degraded":
            reasons = ["PCIe replays rising"]
        a.nodes[name] = NodeVerdict(name, state, reasons, gpu_states)
    ranks = n_nodes * gpus
    for r in range(ranks):
        node = f"node-{r // gpus + 1}"
        score = 1.31 if r == 5 else 1.0 + 0.001 * r
        a.straggler_scores.append(StragglerScore(job_id, r, node, str(r % gpus), score))
    a.findings.append(
        Finding(
            kind="straggler",
            severity="warning",
            node="node-1",
            gpu="5",
            rank=5,
            job_id=job_id,
            start=start + 300,
            score=1.31,
            cause="thermal_throttle",
            evidence={"DCGM_FI_DEV_SM_CLOCK": "1980 -> 1410 MHz"},
            action="drain after the job's next checkpoint",
        )
    )
    a.jobs[job_id] = JobSummary(
        job_id=job_id,
        ranks=ranks,
        nodes=[f"node-{i}" for i in range(1, n_nodes + 1)],
        mfu=0.41,
        tokens_per_second=123456.0,
        step_seconds=1.9,
        stragglers=[5],
    )
    return a


class ScriptedAnalyze:
    """An ``analyze(start, end)`` that returns the cycle result of ``result`` (a report, or a whole
    :class:`LiveResult` whose report it then holds) or raises ``error``; counts its calls."""

    def __init__(self, result: Report | LiveResult | None = None) -> None:
        live = result if isinstance(result, LiveResult) else LiveResult(result or make_analysis())
        self.result, self.live = live.report, live
        self.error: Exception | None = None
        self.calls: list[tuple[float, float]] = []
        self.gate: threading.Event | None = None

    def __call__(self, start: float, end: float) -> LiveResult:
        self.calls.append((start, end))
        if self.gate is not None:
            self.gate.wait(10)
        if self.error is not None:
            raise self.error
        if self.live.report is not self.result:  # a test replaced the report
            self.live = LiveResult(self.result)
        return self.live


def prometheus_down() -> FleetscopeError:
    return FleetscopeError("cannot reach Prometheus at http://127.0.0.1:9: connection refused")


# --- fleetscope serve as a real process ----------------------------------------------------


class ServeProcess(FleetscopeProcess):
    """``fleetscope serve`` on a free loopback port, as a subprocess, stopped on exit."""

    ready_path = "/healthz"

    def __init__(
        self, prometheus: str, *flags: str, workdir: Path, env: dict[str, str] | None = None
    ) -> None:
        port = free_port()
        argv = [
            "--log.level",
            "info",
            "serve",
            "--prometheus",
            prometheus,
            "--listen",
            f"127.0.0.1:{port}",
            *flags,
        ]
        super().__init__("serve", argv, port, workdir, env)

    def api(self, path: str) -> dict | None:
        """The JSON of ``GET path``; None unless it answered 200."""
        status, body = http_get(f"{self.url}{path}", timeout=10)
        return json.loads(body) if status == 200 else None

    def finding_keys(self) -> list[tuple] | None:
        """Each served finding as (kind, node, gpu, rank, job, cause, severity); None until ready."""
        doc = self.api("/api/v1/findings")
        if doc is None or not doc["status"]["ready"]:
            return None
        return [
            (f["kind"], f["node"], f["gpu"], f["rank"], f["job_id"], f["cause"], f["severity"])
            for f in doc["findings"]
        ]


# --- headless Chromium ----------------------------------------------------------------------

WINDOW = (1200, 800)


def chromium(url: str, tmp: Path, *mode: str, budget_ms: int = 8000) -> subprocess.CompletedProcess:
    """Run Debian's headless Chromium once (``--dump-dom`` or ``--screenshot=FILE``)."""
    profile = tmp / f"chromium-profile-{len(list(tmp.glob('chromium-profile-*')))}"
    argv = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
        f"--user-data-dir={profile}",
        f"--virtual-time-budget={budget_ms}",
        *mode,
        url,
    ]
    res = subprocess.run(argv, capture_output=True, timeout=90, check=False)
    if res.returncode != 0:
        raise AssertionError(
            f"chromium failed ({res.returncode}): {res.stderr.decode(errors='replace')[-2000:]}"
        )
    return res


def close(rgb: tuple[int, int, int], want: tuple[int, int, int], tol: int = 12) -> bool:
    return all(abs(a - b) <= tol for a, b in zip(rgb, want, strict=True))


# --- functions a child process can run (module-level, so picklable) ---------------------------


def analyze_small(start: float, end: float) -> LiveResult:
    return LiveResult(make_analysis(start=start, end=end))


def analyze_dies(start: float, end: float) -> LiveResult:
    os._exit(9)  # as if the kernel's OOM killer took the analysis process


def analyze_refuses(start: float, end: float) -> LiveResult:
    raise FleetscopeError("Prometheus at http://127.0.0.1:9 answered 503: overloaded")


def analyze_hangs(start: float, end: float) -> LiveResult:
    import time

    time.sleep(3600)  # a Prometheus that never answers, without a timeout
    raise AssertionError("unreachable")


class CountingAnalysis:
    """A stateful analysis (as a sliding source is): each call's report ends at how many calls
    this object has answered, so a caller sees whether the same object ran every time."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, start: float, end: float) -> Report:
        self.calls += 1
        return make_analysis(start=start, end=float(self.calls))
