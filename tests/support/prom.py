"""Start a real Prometheus (Debian's package) on loopback for a test, and talk to its HTTP API.

Every test that needs Prometheus starts its own on a free port with its own data directory and stops
it afterwards. ``promtool`` runs for real too.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(
    predicate: Callable[[], Any], timeout: float = 30.0, interval: float = 0.2, what: str = ""
) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail the test with ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        try:
            result = predicate()
            if result:
                return result
        except Exception as exc:  # noqa: BLE001 - keep polling, report the last one
            last_exc = exc
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}: {last_exc}")


def http_get(url: str, timeout: float = 5.0, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def promtool(*args: str, input: bytes | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, *args], input=input, capture_output=True, timeout=timeout, check=False)


def backfill_openmetrics(openmetrics_file: Path, data_dir: Path) -> None:
    """Load a recorded OpenMetrics file into a TSDB directory (``promtool tsdb create-blocks-from``)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    res = promtool(
        "tsdb", "create-blocks-from", "openmetrics", str(openmetrics_file), str(data_dir), timeout=600
    )
    if res.returncode != 0:
        raise AssertionError(f"promtool backfill failed: {res.stderr.decode()[-2000:]}")


def backfill_rules(
    url: str, rule_file: Path, start: float, end: float, data_dir: Path, interval: str = "60s"
) -> None:
    """Evaluate ``rule_file``'s recording rules against the Prometheus at ``url`` from ``start`` to
    ``end`` every ``interval`` (``promtool tsdb create-blocks-from rules``) and move the blocks into
    ``data_dir``: backfilled data is never evaluated by rules on its own. Prometheus reads the
    blocks when it starts next."""
    out = data_dir.parent / f"{data_dir.name}-rule-blocks"
    res = promtool(
        "tsdb",
        "create-blocks-from",
        "rules",
        f"--url={url}",
        f"--start={int(start)}",
        f"--end={int(end)}",
        f"--output-dir={out}",
        f"--eval-interval={interval}",
        str(rule_file),
        timeout=600,
    )
    if res.returncode != 0:
        raise AssertionError(f"promtool rule backfill failed: {res.stderr.decode()[-2000:]}")
    for block in out.iterdir():
        shutil.move(str(block), data_dir / block.name)
    out.rmdir()


def discovery_rule_file(directory: Path) -> Path:
    """A rule file holding the generated recording group's discovery rule alone (the sharded
    service reads it; backfilling the whole group would cost a test minutes)."""
    from fleetscope.alerts.config import THRESHOLDS
    from fleetscope.alerts.recording import discovery

    rule = discovery()
    path = directory / "discovery.rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "discovery", "rules": [rule.to_rule(THRESHOLDS)]}]}))
    return path


class Prometheus:
    """A real Prometheus process with a generated config.

    ``scrape_configs`` are Prometheus scrape config dicts; ``rule_files`` are paths.
    Use as a context manager, or call :meth:`start` / :meth:`stop`.
    """

    def __init__(
        self,
        workdir: Path,
        scrape_configs: list[dict] | None = None,
        rule_files: list[Path] | None = None,
        scrape_interval: str = "1s",
        evaluation_interval: str = "1s",
        data_dir: Path | None = None,
        alertmanager_url: str | None = None,
        extra_args: list[str] | None = None,
    ) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.data_dir = data_dir or self.workdir / "data"
        config: dict[str, Any] = {
            "global": {"scrape_interval": scrape_interval, "evaluation_interval": evaluation_interval},
            "scrape_configs": scrape_configs or [],
            "rule_files": [str(p) for p in (rule_files or [])],
        }
        if alertmanager_url:
            hostport = alertmanager_url.split("://", 1)[-1].rstrip("/")
            config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [hostport]}]}]}
        self.config_file = self.workdir / "prometheus.yml"
        self.config_file.write_text(yaml.safe_dump(config, sort_keys=False))
        self.extra_args = extra_args or []
        self.proc: subprocess.Popen | None = None
        self.log_file = self.workdir / "prometheus.log"

    def start(self, timeout: float = 60) -> Prometheus:
        log = self.log_file.open("wb")
        self.proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={self.config_file}",
                f"--storage.tsdb.path={self.data_dir}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--web.enable-lifecycle",
                "--storage.tsdb.retention.time=100y",
                *self.extra_args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for(self._ready, timeout=timeout, what="prometheus ready")
        except AssertionError:
            self.stop()
            raise AssertionError(f"prometheus did not start:\n{self.log_file.read_text()[-3000:]}") from None
        return self

    def _ready(self) -> bool:
        if self.proc and self.proc.poll() is not None:
            raise AssertionError(f"prometheus exited: {self.log_file.read_text()[-3000:]}")
        return http_get(f"{self.url}/-/ready", timeout=1)[0] == 200

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def __enter__(self) -> Prometheus:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- HTTP API -------------------------------------------------------------------------
    def api(self, path: str, **params: Any) -> Any:
        qs = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        status, body = http_get(f"{self.url}/api/v1/{path}?{qs}", timeout=30)
        data = json.loads(body)
        if status != 200 or data.get("status") != "success":
            raise AssertionError(f"prometheus API {path} {params}: {status} {data}")
        return data["data"]

    def query(self, expr: str, time: float | None = None) -> list[dict]:
        """Instant query; returns the result vector (list of {metric, value})."""
        return self.api("query", query=expr, time=time)["result"]

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict]:
        return self.api("query_range", query=expr, start=start, end=end, step=step)["result"]

    def value(self, expr: str, time: float | None = None) -> float | None:
        """The single value of an instant query, or None when it returns nothing."""
        result = self.query(expr, time)
        if not result:
            return None
        assert len(result) == 1, f"{expr} returned {len(result)} series"
        return float(result[0]["value"][1])

    def targets_up(self) -> bool:
        active = self.api("targets")["activeTargets"]
        return bool(active) and all(t["health"] == "up" for t in active)

    def wait_until(self, expr: str, timeout: float = 30, min_series: int = 1) -> list[dict]:
        """Wait until an instant query returns at least ``min_series`` series."""
        return wait_for(
            lambda: (r := self.query(expr)) and len(r) >= min_series and r,
            timeout=timeout,
            what=f"query {expr!r} to return {min_series} series",
        )


@contextmanager
def scenario_prometheus(tmp: Path, spec: Any) -> Iterator[tuple[Prometheus, float, float]]:
    """A real Prometheus holding the recording of the simulator's ``spec`` (backfilled into ``tmp``):
    (it, the scenario's start, its end)."""
    from fleetscope.simulate.record import write_scenario

    out, _ = write_scenario(spec, tmp / "s.om")
    backfill_openmetrics(out, tmp / "data")
    with Prometheus(tmp / "p", data_dir=tmp / "data") as p:
        yield p, spec.start, spec.start + spec.duration_s
