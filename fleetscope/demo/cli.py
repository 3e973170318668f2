"""``fleetscope demo``'s arguments and its run: check the arguments, start the parts in order, watch.

What the demo does is described in :mod:`fleetscope.demo`.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import tempfile
import threading
import time
from pathlib import Path

from fleetscope import defaults
from fleetscope.demo.direct import DirectAnalysis
from fleetscope.demo.links import alertmanager_lines, prometheus_alerts_page
from fleetscope.demo.net import local_address, pick_port, port_free
from fleetscope.demo.processes import Processes, Stopped, find_binary, stop_on_signals
from fleetscope.demo.stack import (
    DEFAULT_ALERTMANAGER_PORT,
    DEFAULT_PROMETHEUS_PORT,
    HANG_FAULTS,
    INSTALL_HINT,
    start_alertmanager,
    start_prometheus,
    start_service,
    start_simulator,
)
from fleetscope.demo.watcher import Watcher, say, watch
from fleetscope.errors import FleetscopeError
from fleetscope.times import parse_duration

log = logging.getLogger(__name__)

PROMETHEUS_NAMES = ("prometheus",)
WORKLOADS = ("training", "inference")
#: The fault each workload injects unless --fault says otherwise: a lost GPU stops a training job
#: (failing_node) or kills the vLLM replica on it (failing_replica, seconds after the XID). A
#: throttled GPU's replica (slow_replica) takes minutes and a larger fleet to stand out.
DEFAULT_FAULT = {"training": "gpu_lost", "inference": "gpu_lost"}
ALERTMANAGER_NAMES = ("prometheus-alertmanager", "alertmanager")  # Debian's name, upstream's name


def positive_duration(text: str) -> float:
    """A duration > 0 in seconds: Prometheus style (``90s``, ``5m``, ``1h30m``) or plain seconds."""
    try:
        value = parse_duration(text)
    except FleetscopeError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--duration",
        type=positive_duration,
        default=None,
        metavar="S",
        help="stop after this long, e.g. 300 or 5m (default: Ctrl-C)",
    )
    p.add_argument("--nodes", type=int, default=4, help="virtual nodes (default 4)")
    from fleetscope.simulate.spec import FAULT_KINDS, INFERENCE_FAULT_KINDS

    p.add_argument(
        "--workload",
        choices=WORKLOADS,
        default="training",
        help="what the virtual nodes run: a training job, or vLLM replicas serving a model (default "
        "training)",
    )
    p.add_argument(
        "--fault",
        choices=sorted({*FAULT_KINDS, *HANG_FAULTS, *INFERENCE_FAULT_KINDS}),
        default=None,
        help="fault to inject (default gpu_lost; hang_*: a hung collective that NCCL RAS names)",
    )
    p.add_argument(
        "--fault-at",
        type=positive_duration,
        default=90.0,
        metavar="S",
        help="this long after the start, e.g. 90 or 2m (default 90)",
    )
    p.add_argument("--fault-node", type=int, default=1, metavar="N", help="node index (default 1)")
    p.add_argument("--fault-gpu", type=int, default=3, metavar="N", help="GPU index on that node (default 3)")
    p.add_argument(
        "--seed",
        type=int,
        default=1,
        help="random seed of the simulated cluster (default 1; same seed, same run)",
    )
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


def _check_fault(args: argparse.Namespace) -> None:
    """Fill in the workload's default fault; refuse a fault the workload's simulator cannot inject."""
    from fleetscope.simulate.spec import FAULT_KINDS, INFERENCE_FAULT_KINDS

    workload = getattr(args, "workload", "training")
    args.workload = workload
    if args.fault is None:
        args.fault = DEFAULT_FAULT[workload]
    if workload == "inference":
        allowed = ("healthy", "thermal_throttle", "power_brake", "gpu_lost", *INFERENCE_FAULT_KINDS)
        if args.nodes < 3:
            raise FleetscopeError(
                "--workload inference needs --nodes of at least 3 (replicas compare with 2 peers)"
            )
    else:
        allowed = (*FAULT_KINDS, *HANG_FAULTS)
    if args.fault not in allowed:
        raise FleetscopeError(
            f"--fault {args.fault} is not simulated for --workload {workload}; one of: {', '.join(allowed)}"
        )


def _service_address(args: argparse.Namespace) -> tuple[str, int]:
    """Host and port of the web page: ``--listen`` (its port must be free), else the default or any."""
    from fleetscope.service.cli import parse_listen

    host, port = parse_listen(args.listen or f"127.0.0.1:{defaults.SERVICE_PORT}")
    if port_free(host, port):
        return host, port
    if args.listen:
        raise FleetscopeError(f"cannot serve the web page on {host}:{port}: the port is in use")
    return host, pick_port(host, None, port)


def run(args: argparse.Namespace) -> int:
    if args.nodes < 2:
        raise FleetscopeError("--nodes must be at least 2 (the analyzers compare a node with its peers)")
    if not 0 <= args.fault_node < args.nodes:
        raise FleetscopeError(f"--fault-node must be in 0..{args.nodes - 1}")
    _check_fault(args)
    host, service_port = _service_address(args)
    if args.duration is not None and args.fault != "healthy" and args.duration <= args.fault_at:
        say(
            f"note: --duration {args.duration:g}s ends before the {args.fault} fault at {args.fault_at:g}s "
            "(--fault-at): the demo will stop before anything goes wrong"
        )

    keep = args.workdir is not None
    workdir = Path(args.workdir) if keep else Path(tempfile.mkdtemp(prefix="fleetscope-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        with stop_on_signals() as stop:
            procs = Processes(workdir, stop)
            try:
                return _run(args, host, service_port, procs, stop)
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
    args: argparse.Namespace, host: str, service_port: int, procs: Processes, stop: threading.Event
) -> int:
    started = time.monotonic()
    interval = 1.0 if args.fast else 5.0
    prometheus_bin = None if args.no_prometheus else find_binary(PROMETHEUS_NAMES)
    alertmanager_bin = None if args.no_prometheus else find_binary(ALERTMANAGER_NAMES)

    targets_file = start_simulator(args, procs)
    if prometheus_bin is None:
        return _run_direct(args, targets_file, procs, stop, started)

    alertmanager_url = None
    if alertmanager_bin:
        alertmanager_url = start_alertmanager(alertmanager_bin, args, procs)
    else:
        say(f"Alertmanager not found; alerts are visible in Prometheus only ({INSTALL_HINT})")
    service = f"{local_address(host)}:{service_port}"
    prometheus_url = start_prometheus(
        prometheus_bin, args, procs, targets_file, service, alertmanager_url, interval
    )
    service_url = start_service(procs, prometheus_url, host, service_port, interval)

    say(f"web page:      {service_url}/")
    say(f"findings API:  {service_url}/api/v1/findings")
    alerts_page = prometheus_alerts_page(prometheus_url)
    say(f"Prometheus:    {alerts_page}")
    if alertmanager_url:
        for line in alertmanager_lines(alertmanager_url, alerts_page):
            say(line)
    say("watching; findings and firing alerts appear below. Ctrl-C stops everything.")

    watcher = Watcher(service_url, alertmanager_url)
    return watch(procs, stop, watcher.poll, interval, args.duration, started)


def _run_direct(
    args: argparse.Namespace, targets_file: Path, procs: Processes, stop: threading.Event, started: float
) -> int:
    if args.no_prometheus:
        say("not starting Prometheus (--no-prometheus)")
    else:
        say(f"Prometheus not found: {INSTALL_HINT}")
    say("meanwhile: scraping the virtual nodes directly and analyzing them (no web page, no alerts)")
    direct = DirectAnalysis(targets_file, procs.workdir / "recording.om")
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

    return watch(procs, stop, poll, interval, args.duration, started)
