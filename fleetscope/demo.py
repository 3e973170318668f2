"""``fleetscope demo``: a simulated GPU training cluster, watched live, on one machine without a GPU.

It starts, each as its own process in a scratch directory:

1. the simulator's virtual nodes (``fleetscope simulate --live``), each serving ``/metrics`` on its
   own port, with one fault injected a minute or two in (``--fault``, ``--fault-at``);
2. a real Prometheus scraping them (file_sd) with the generated alerting rules, sending alerts to
3. a real Alertmanager, when their binaries are installed (Debian: ``prometheus``,
   ``prometheus-alertmanager``);
4. the live analysis service (``fleetscope serve``) reading that Prometheus.

Then it prints the web page's address and every finding and firing alert as it appears, and stops
all of them (children first in reverse order, then the scratch directory) on Ctrl-C, SIGTERM, at
``--duration`` or when one of them dies.

Without a Prometheus binary the service has nothing to read, so the demo says how to install one
and falls back to analyzing the virtual nodes itself: it scrapes them, keeps the samples in an
OpenMetrics recording and runs the same analyzers over it (no web page, no alerts in that mode).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fleetscope import defaults
from fleetscope.argtypes import positive_float
from fleetscope.errors import FleetscopeError
from fleetscope.textformat import escape_label_value

log = logging.getLogger("fleetscope.demo")

ROOT = Path(__file__).resolve().parent.parent
PROMETHEUS_NAMES = ("prometheus",)
ALERTMANAGER_NAMES = ("prometheus-alertmanager", "alertmanager")  # Debian's name, upstream's name
INSTALL_HINT = (
    "install them with: sudo apt-get install prometheus prometheus-alertmanager "
    "(or put the upstream binaries on PATH)"
)
DEFAULT_PROMETHEUS_PORT = 9090
DEFAULT_ALERTMANAGER_PORT = 9093


# --- command line ----------------------------------------------------------------------------
def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--duration",
        type=positive_float,
        default=None,
        metavar="S",
        help="stop after S seconds (default: Ctrl-C)",
    )
    p.add_argument("--nodes", type=int, default=4, help="virtual nodes (default 4)")
    from fleetscope.simulate.spec import FAULT_KINDS

    p.add_argument(
        "--fault", choices=FAULT_KINDS, default="gpu_lost", help="fault to inject (default gpu_lost)"
    )
    p.add_argument(
        "--fault-at", type=positive_float, default=90.0, metavar="S", help="seconds after start (default 90)"
    )
    p.add_argument("--fault-node", type=int, default=1, metavar="N", help="node index (default 1)")
    p.add_argument("--fault-gpu", type=int, default=3, metavar="N", help="GPU index on that node (default 3)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--fast",
        action="store_true",
        help="scrape, evaluate and analyze every 1-2 s instead of 5 s (tests, impatient people)",
    )
    p.add_argument(
        "--listen",
        default=None,
        metavar="HOST:PORT",
        help=f"address of the web page and API (default 127.0.0.1:{defaults.SERVICE_PORT}, or a free port)",
    )
    p.add_argument(
        "--base-port",
        type=int,
        default=defaults.SIMULATOR_BASE_PORT,
        help=f"first port of the virtual nodes (default {defaults.SIMULATOR_BASE_PORT})",
    )
    p.add_argument(
        "--prometheus-port", type=int, default=None, help=f"default {DEFAULT_PROMETHEUS_PORT}, or a free one"
    )
    p.add_argument(
        "--alertmanager-port",
        type=int,
        default=None,
        help=f"default {DEFAULT_ALERTMANAGER_PORT}, or a free one",
    )
    p.add_argument(
        "--no-prometheus",
        action="store_true",
        help="do not start Prometheus/Alertmanager even when installed (analyze the nodes directly)",
    )
    p.add_argument(
        "--workdir", default=None, help="keep configs, logs and data here (default: a temporary directory)"
    )


# --- small helpers ---------------------------------------------------------------------------
def port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def pick_port(host: str, preferred: int | None, default: int) -> int:
    """``preferred`` if given (it must be free), else ``default`` when free, else any free port."""
    if preferred is not None:
        if not port_free(host, preferred):
            raise FleetscopeError(f"port {preferred} on {host} is in use")
        return preferred
    if port_free(host, default):
        return default
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def pick_port_range(host: str, first: int, count: int) -> int:
    """The first port of ``count`` consecutive free ports, starting the search at ``first``."""
    for start in range(first, min(first + 2000, 65535 - count), count):
        if all(port_free(host, p) for p in range(start, start + count)):
            return start
    raise FleetscopeError(f"no {count} consecutive free ports from {first} on {host}")


def http_json(url: str, timeout: float = 3.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read())


def http_ok(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status == 200
    except (OSError, urllib.error.URLError):
        return False


def find_binary(names: tuple[str, ...]) -> str | None:
    for name in names:
        path = shutil.which(name) or (f"/usr/bin/{name}" if os.access(f"/usr/bin/{name}", os.X_OK) else None)
        if path:
            return path
    return None


def _death_signal_setter() -> Callable[[], None] | None:
    """A preexec function making the child receive SIGTERM when the demo dies (Linux only).

    libc is loaded here, in the parent: the child, between fork and exec, only makes the call.
    """
    try:
        import ctypes

        prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return lambda: prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def say(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)


# --- the children ----------------------------------------------------------------------------
@dataclass
class Child:
    name: str
    proc: subprocess.Popen
    log_path: Path

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


@dataclass
class Processes:
    """The demo's child processes; stopped in reverse start order."""

    workdir: Path
    stop: threading.Event = field(default_factory=threading.Event)
    children: list[Child] = field(default_factory=list)

    def start(self, name: str, argv: list[str]) -> Child:
        log_path = self.workdir / f"{name}.log"
        out = log_path.open("wb")
        # Own session: a Ctrl-C in the terminal reaches only the demo, which stops the children in
        # order instead of all of them dying at once.
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self.workdir,
            start_new_session=True,
            preexec_fn=_death_signal_setter(),
        )
        out.close()
        child = Child(name, proc, log_path)
        self.children.append(child)
        log.debug("started %s (pid %d): %s", name, proc.pid, " ".join(argv))
        return child

    def dead(self) -> Child | None:
        return next((c for c in self.children if c.proc.poll() is not None), None)

    def stop_all(self, timeout: float = 15.0) -> None:
        for child in reversed(self.children):
            if child.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for child in reversed(self.children):
            try:
                child.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.proc.pid, signal.SIGKILL)
                child.proc.wait()
        self.children.clear()


def fleetscope_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "fleetscope", *args]


class Stopped(Exception):
    """Ctrl-C or SIGTERM arrived while the demo was still starting."""


def wait_until(predicate: Callable[[], Any], timeout: float, what: str, procs: Processes) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if procs.stop.is_set():
            raise Stopped
        dead = procs.dead()
        if dead:
            raise FleetscopeError(f"{dead.name} exited while starting:\n{dead.log_tail()}")
        result = predicate()
        if result:
            return result
        time.sleep(0.2)
    raise FleetscopeError(f"timed out after {timeout:.0f}s waiting for {what}")


# --- configuration files ---------------------------------------------------------------------
def rule_files(workdir: Path) -> list[Path]:
    """The generated alerting rules: the committed files of a checkout, else generated afresh."""
    committed = sorted((ROOT / "alerts").glob("*.rules.yml"))
    if committed:
        return committed
    out = workdir / "rules"
    out.mkdir(exist_ok=True)
    from fleetscope.alerts.render import rule_files as render_rule_files

    paths = []
    for name, text in render_rule_files().items():
        (out / name).write_text(text)
        paths.append(out / name)
    return sorted(paths)


def prometheus_config(
    targets_file: Path, service: str, rules: list[Path], alertmanager: str | None, interval: float
) -> dict:
    every = f"{interval:g}s"
    config: dict[str, Any] = {
        "global": {"scrape_interval": every, "evaluation_interval": every, "scrape_timeout": every},
        "rule_files": [str(p) for p in rules],
        "scrape_configs": [
            {"job_name": "fleetscope-nodes", "file_sd_configs": [{"files": [str(targets_file)], "refresh_interval": "5s"}]},
            {"job_name": "fleetscope-service", "static_configs": [{"targets": [service]}]},
        ],
    }  # fmt: skip
    if alertmanager:
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]}
    return config


def alertmanager_config(fast: bool) -> dict:
    # No receiver sends anything anywhere: the alerts are seen in Alertmanager's UI and API.
    return {
        "route": {
            "receiver": "demo",
            "group_by": ["alertname", "Hostname"],
            "group_wait": "1s" if fast else "10s",
            "group_interval": "10s" if fast else "1m",
            "repeat_interval": "1h",
        },
        "receivers": [{"name": "demo"}],
    }


# --- watching --------------------------------------------------------------------------------
def describe_finding(f: dict) -> str:
    where = " ".join(f"{k}={f[k]}" for k in ("node", "gpu", "rank", "job_id") if f.get(k) is not None)
    return f"FINDING {f.get('kind')} ({f.get('severity')}) {where} cause={f.get('cause')}: {f.get('action')}"


def finding_key(f: dict) -> tuple:
    return tuple(f.get(k) for k in ("kind", "node", "gpu", "rank", "job_id", "cause"))


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
                for f in http_json(f"{self.service_url}/api/v1/findings").get("findings", []):
                    key = finding_key(f)
                    if key not in self.findings:
                        self.findings.add(key)
                        say(describe_finding(f))
        if self.alertmanager_url:
            with contextlib.suppress(OSError, ValueError, urllib.error.URLError):
                for a in http_json(f"{self.alertmanager_url}/api/v2/alerts?active=true&silenced=false"):
                    if a.get("status", {}).get("state") != "active" or a.get("fingerprint") in self.alerts:
                        continue
                    self.alerts.add(a["fingerprint"])
                    say(describe_alert(a))


# --- the fallback without Prometheus ---------------------------------------------------------
class DirectAnalysis:
    """Scrape the virtual nodes into an OpenMetrics recording and run the analyzers over it.

    Only for machines without Prometheus: it keeps the last ``window`` seconds of scrapes in memory
    (tens of MB for four nodes) and there is no web page or alerting in this mode.
    """

    def __init__(self, targets_file: Path, recording: Path, window: float = 900.0) -> None:
        self.targets_file = targets_file
        self.recording = recording
        self.window = window
        self.scrapes: deque[tuple[float, list[tuple[str, str]]]] = deque()
        self.seen: set[tuple] = set()

    def targets(self) -> list[str]:
        groups = json.loads(self.targets_file.read_text())
        return [t for g in groups for t in g.get("targets", [])]

    def scrape(self) -> None:
        from prometheus_client.parser import text_string_to_metric_families

        now = time.time()
        lines: list[tuple[str, str]] = []
        for target in self.targets():
            try:
                with urllib.request.urlopen(f"http://{target}/metrics", timeout=3) as resp:
                    text = resp.read().decode()
            except (OSError, urllib.error.URLError):
                continue
            for family in text_string_to_metric_families(text):
                for s in family.samples:
                    labels = ",".join(f'{k}="{escape_label_value(v)}"' for k, v in sorted(s.labels.items()))
                    lines.append((s.name, f"{s.name}{{{labels}}} {s.value!r} {now:.3f}"))
        self.scrapes.append((now, lines))
        while self.scrapes and self.scrapes[0][0] < now - self.window:
            self.scrapes.popleft()

    def write(self) -> None:
        """Samples grouped by name, in time order within each (as OpenMetrics requires)."""
        by_name: dict[str, list[str]] = {}
        for _, lines in self.scrapes:
            for name, line in lines:
                by_name.setdefault(name, []).append(line)
        tmp = self.recording.with_suffix(".tmp")
        with tmp.open("w") as out:
            for name, lines in by_name.items():
                out.write(f"# TYPE {name} unknown\n")
                out.write("\n".join(lines) + "\n")
            out.write("# EOF\n")
        tmp.replace(self.recording)

    def analyze(self) -> None:
        from fleetscope.analyzers.api import analyze_file

        self.write()
        analysis = analyze_file(self.recording)
        for f in analysis.findings:
            d = f.to_dict()
            if finding_key(d) not in self.seen:
                self.seen.add(finding_key(d))
                say(describe_finding(d))


# --- main ------------------------------------------------------------------------------------
@contextlib.contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """An event set by SIGINT/SIGTERM; the previous handlers come back afterwards."""
    stop = threading.Event()
    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, lambda *_: stop.set())
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run(args: argparse.Namespace) -> int:
    from fleetscope.service.cli import parse_listen

    if args.nodes < 2:
        raise FleetscopeError("--nodes must be at least 2 (the analyzers compare a node with its peers)")
    if not 0 <= args.fault_node < args.nodes:
        raise FleetscopeError(f"--fault-node must be in 0..{args.nodes - 1}")
    host, service_port = parse_listen(args.listen or f"127.0.0.1:{defaults.SERVICE_PORT}")
    if not port_free(host, service_port):
        if args.listen:
            raise FleetscopeError(f"cannot serve the web page on {host}:{service_port}: the port is in use")
        service_port = pick_port(host, None, service_port)

    keep = args.workdir is not None
    workdir = Path(args.workdir) if keep else Path(tempfile.mkdtemp(prefix="fleetscope-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        with stop_on_signals() as stop:
            procs = Processes(workdir, stop)
            try:
                return _run(args, host, service_port, workdir, procs, stop)
            except Stopped:
                say("stopping")
                return 0
            finally:
                procs.stop_all()
    finally:
        if keep:
            say(f"stopped; configs, logs and data are in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
            say("stopped")


def _run(
    args: argparse.Namespace,
    host: str,
    service_port: int,
    workdir: Path,
    procs: Processes,
    stop: threading.Event,
) -> int:
    started = time.monotonic()
    interval = 1.0 if args.fast else 5.0
    prometheus_bin = None if args.no_prometheus else find_binary(PROMETHEUS_NAMES)
    alertmanager_bin = None if args.no_prometheus else find_binary(ALERTMANAGER_NAMES)

    # 1. the simulated cluster
    base_port = pick_port_range("127.0.0.1", args.base_port, args.nodes)
    targets_file = workdir / "targets.json"
    targets_file.unlink(missing_ok=True)  # a kept --workdir may hold the last run's
    procs.start(
        "simulator",
        fleetscope_argv(
            "simulate", "--live", "--nodes", str(args.nodes), "--listen", "127.0.0.1",
            "--base-port", str(base_port), "--fault", args.fault, "--fault-at", f"{args.fault_at:g}",
            "--fault-node", str(args.fault_node), "--fault-gpu", str(args.fault_gpu), "--seed", str(args.seed), "--targets-file", str(targets_file),
        ),
    )  # fmt: skip
    wait_until(
        lambda: targets_file.is_file() and http_ok(f"http://127.0.0.1:{base_port}/metrics"),
        60,
        "the virtual nodes",
        procs,
    )
    say(
        f"simulated cluster: {args.nodes} virtual nodes on 127.0.0.1:{base_port}-{base_port + args.nodes - 1}, "
        f"fault {args.fault} on node {args.fault_node} {args.fault_at:g}s after start"
    )

    if prometheus_bin is None:
        return _run_direct(args, targets_file, workdir, procs, stop, started)

    # 2. Alertmanager, 3. Prometheus
    alertmanager_url = None
    if alertmanager_bin:
        am_port = pick_port("127.0.0.1", args.alertmanager_port, DEFAULT_ALERTMANAGER_PORT)
        am_config = workdir / "alertmanager.yml"
        am_config.write_text(yaml.safe_dump(alertmanager_config(args.fast), sort_keys=False))
        procs.start(
            "alertmanager",
            [
                alertmanager_bin, f"--config.file={am_config}", f"--storage.path={workdir / 'alertmanager'}",
                f"--web.listen-address=127.0.0.1:{am_port}", "--cluster.listen-address=",
            ],
        )  # fmt: skip
        alertmanager_url = f"http://127.0.0.1:{am_port}"
        wait_until(lambda: http_ok(f"{alertmanager_url}/-/ready"), 60, "Alertmanager", procs)
    else:
        say(f"Alertmanager not found; alerts are visible in Prometheus only ({INSTALL_HINT})")

    rules = rule_files(workdir)
    if not rules:
        say("no generated rule files found (run `fleetscope generate` in a checkout); no alerts")
    prom_port = pick_port("127.0.0.1", args.prometheus_port, DEFAULT_PROMETHEUS_PORT)
    prom_config = workdir / "prometheus.yml"
    prom_config.write_text(
        yaml.safe_dump(
            prometheus_config(
                targets_file,
                f"{'127.0.0.1' if host in ('0.0.0.0', '::', '') else host}:{service_port}",
                rules,
                alertmanager_url.split("://", 1)[1] if alertmanager_url else None,
                interval,
            ),
            sort_keys=False,
        )
    )
    procs.start(
        "prometheus",
        [
            prometheus_bin, f"--config.file={prom_config}", f"--storage.tsdb.path={workdir / 'prometheus'}",
            f"--web.listen-address=127.0.0.1:{prom_port}", "--storage.tsdb.retention.time=1d",
        ],
    )  # fmt: skip
    prometheus_url = f"http://127.0.0.1:{prom_port}"
    wait_until(lambda: http_ok(f"{prometheus_url}/-/ready"), 60, "Prometheus", procs)

    # 4. the live service
    procs.start(
        "service",
        fleetscope_argv(
            "serve", "--prometheus", prometheus_url, "--listen", f"{host}:{service_port}",
            "--interval", f"{2 * interval:g}", "--window", "900", "--step", f"{interval:g}",
        ),
    )  # fmt: skip
    service_url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::', '') else host}:{service_port}"
    wait_until(lambda: http_ok(f"{service_url}/healthz"), 60, "the fleetscope service", procs)

    say(f"web page:      {service_url}/")
    say(f"findings API:  {service_url}/api/v1/findings")
    say(f"Prometheus:    {prometheus_url}/alerts")
    if alertmanager_url:
        say(f"Alertmanager:  {alertmanager_url}/#/alerts")
    say("watching; findings and firing alerts appear below. Ctrl-C stops everything.")

    watcher = Watcher(service_url, alertmanager_url)
    return _watch(args, procs, stop, started, watcher.poll, period=interval)


def _run_direct(
    args: argparse.Namespace,
    targets_file: Path,
    workdir: Path,
    procs: Processes,
    stop: threading.Event,
    started: float,
) -> int:
    if args.no_prometheus:
        say("not starting Prometheus (--no-prometheus)")
    else:
        say(f"Prometheus not found: {INSTALL_HINT}")
    say("meanwhile: scraping the virtual nodes directly and analyzing them (no web page, no alerts)")
    direct = DirectAnalysis(targets_file, workdir / "recording.om")
    interval = 2.0 if args.fast else 5.0
    last_analysis = 0.0

    def poll() -> None:
        nonlocal last_analysis
        direct.scrape()
        if time.monotonic() - last_analysis >= 3 * interval:
            last_analysis = time.monotonic()
            try:
                direct.analyze()
            except FleetscopeError as exc:
                log.debug("analysis not possible yet: %s", exc)

    return _watch(args, procs, stop, started, poll, period=interval)


def _watch(
    args: argparse.Namespace,
    procs: Processes,
    stop: threading.Event,
    started: float,
    poll: Callable[[], None],
    period: float,
) -> int:
    while not stop.is_set():
        dead = procs.dead()
        if dead:
            say(f"{dead.name} exited unexpectedly (code {dead.proc.returncode}); its log ends with:")
            print(dead.log_tail(), file=sys.stderr)
            return 1
        if args.duration is not None and time.monotonic() - started >= args.duration:
            say(f"--duration {args.duration:g}s reached")
            return 0
        poll()
        stop.wait(period)
    say("stopping")
    return 0
