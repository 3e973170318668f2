"""Printing what the demo sees: each finding and each firing alert once, as it appears."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
import urllib.error
from collections.abc import Callable

from fleetscope.analyzers.findings import identity
from fleetscope.demo.net import http_json
from fleetscope.demo.processes import Processes


def say(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)


def describe_finding(f: dict) -> str:
    where = " ".join(f"{k}={f[k]}" for k in ("node", "gpu", "rank", "job_id") if f.get(k) is not None)
    return f"FINDING {f.get('kind')} ({f.get('severity')}) {where} cause={f.get('cause')}: {f.get('action')}"


def describe_alert(a: dict) -> str:
    labels = a.get("labels", {})
    where = " ".join(f"{k}={labels[k]}" for k in ("Hostname", "gpu", "xid") if k in labels)
    summary = a.get("annotations", {}).get("summary", "")
    return f"ALERT {labels.get('alertname')} ({labels.get('severity', '?')}) firing {where}: {summary}"


class Watcher:
    """Polls the service's findings and Alertmanager's alerts; prints each new one once."""

    def __init__(self, service_url: str | None, alertmanager_url: str | None) -> None:
        self.service_url = service_url
        self.alertmanager_url = alertmanager_url
        self.findings: set[tuple] = set()
        self.alerts: set[str] = set()

    def poll(self) -> None:
        if self.service_url:
            with contextlib.suppress(OSError, ValueError, urllib.error.URLError):
                self.new_findings(http_json(f"{self.service_url}/api/v1/findings").get("findings", []))
        if self.alertmanager_url:
            with contextlib.suppress(OSError, ValueError, urllib.error.URLError):
                self.new_alerts(
                    http_json(f"{self.alertmanager_url}/api/v2/alerts?active=true&silenced=false")
                )

    def new_findings(self, findings: list[dict]) -> None:
        for f in findings:
            key = identity(f)  # the same kind, place and cause is printed once
            if key not in self.findings:
                self.findings.add(key)
                say(describe_finding(f))

    def new_alerts(self, alerts: list[dict]) -> None:
        for a in alerts:
            if a.get("status", {}).get("state") != "active" or a.get("fingerprint") in self.alerts:
                continue
            self.alerts.add(a["fingerprint"])
            say(describe_alert(a))


def watch(
    procs: Processes,
    stop: threading.Event,
    poll: Callable[[], None],
    period: float,
    duration: float | None = None,
    started: float | None = None,
) -> int:
    """Call ``poll`` every ``period`` seconds until a stop (0), ``duration`` seconds after
    ``started`` on the monotonic clock (0), or a child's death (1, with the end of its log)."""
    started = time.monotonic() if started is None else started
    while not stop.is_set():
        dead = procs.dead()
        if dead:
            say(f"{dead.name} exited unexpectedly (code {dead.proc.returncode}); its log ends with:")
            print(dead.log_tail(), file=sys.stderr)
            return 1
        if duration is not None and time.monotonic() - started >= duration:
            say(f"--duration {duration:g}s reached")
            return 0
        poll()
        stop.wait(period)
    say("stopping")
    return 0
