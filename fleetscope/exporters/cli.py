"""``fleetscope exporter``: node_exporter-style flags around the collectors and the HTTP server."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from fleetscope import contract, defaults
from fleetscope.errors import FleetscopeError

if TYPE_CHECKING:
    from fleetscope.exporters.base import Collector

log = logging.getLogger("fleetscope.exporter")


def _collector_classes() -> dict[str, type[Collector]]:
    from fleetscope.exporters.registry import KNOWN_COLLECTORS, collector_class

    classes: dict[str, type[Collector]] = {}
    for name in KNOWN_COLLECTORS:
        try:
            classes[name] = collector_class(name)
        except Exception as exc:  # noqa: BLE001 - reported again when the collector is built
            log.debug("collector %s unavailable: %s", name, exc)
    return classes


def add_arguments(p: argparse.ArgumentParser) -> None:
    from fleetscope.exporters.registry import KNOWN_COLLECTORS

    p.add_argument(
        "--web.listen-address",
        dest="listen_address",
        default=f":{defaults.EXPORTER_PORT}",
        help="address to serve /metrics on, [host]:port (default %(default)s)",
    )
    p.add_argument(
        "--web.config.file",
        dest="web_config_file",
        default=None,
        help="exporter-toolkit style YAML with tls_server_config and basic_auth_users (bcrypt)",
    )
    p.add_argument(
        "--web.max-connections",
        dest="max_connections",
        type=int,
        default=64,
        help="connections served at once; more are answered 503 and closed (default %(default)s)",
    )
    p.add_argument(
        "--collector.timeout",
        dest="collector_timeout",
        type=float,
        default=8.0,
        metavar="SECONDS",
        help="how long a scrape waits for the collectors (all run at once); one that is late is "
        "reported with success 0 and not started again until it returns (default %(default)s)",
    )
    p.add_argument("--path.sysfs", dest="sysfs", default="/sys", help="sysfs mount point (default /sys)")
    p.add_argument("--path.procfs", dest="procfs", default="/proc", help="procfs mount point (default /proc)")
    p.add_argument(
        "--path.debugfs",
        dest="debugfs",
        default="/sys/kernel/debug",
        help="debugfs mount point (default /sys/kernel/debug)",
    )
    p.add_argument(
        "--node.label-name",
        dest="node_label",
        default=contract.NODE_LABEL,
        help="name of the node label on every series (default Hostname, as dcgm-exporter)",
    )
    p.add_argument(
        "--node.name",
        dest="node_name",
        default=None,
        help="value of the node label (default: $NODE_NAME, else the host name)",
    )
    p.add_argument(
        "--collector.disable-defaults",
        dest="disable_defaults",
        action="store_true",
        help="enable only the collectors named with --collector.<name>",
    )
    p.add_argument(
        "--once",
        action="store_true",
        help="print one scrape in the text format to stdout and exit",
    )
    classes = _collector_classes()
    for name in KNOWN_COLLECTORS:
        cls = classes.get(name)
        default_on = KNOWN_COLLECTORS[name][1]
        what = (cls.description if cls else "") or name
        p.add_argument(
            f"--collector.{name}",
            dest=f"collector_{name}",
            action="store_true",
            default=None,
            help=f"enable the {name} collector: {what} (default {'on' if default_on else 'off'}; "
            f"--no-collector.{name} disables it)",
        )
        p.add_argument(
            f"--no-collector.{name}",
            dest=f"collector_{name}",
            action="store_false",
            help=argparse.SUPPRESS,
        )
        if cls is not None:
            cls.add_arguments(p)


def enabled_collectors(args: argparse.Namespace) -> list[str]:
    from fleetscope.exporters.registry import KNOWN_COLLECTORS

    names = []
    for name in KNOWN_COLLECTORS:
        flag = getattr(args, f"collector_{name}", None)
        if flag is None:
            flag = (not args.disable_defaults) and KNOWN_COLLECTORS[name][1]
        if flag:
            names.append(name)
    return names


def node_context(args: argparse.Namespace):
    from fleetscope.exporters.base import NodeContext

    for flag, path in (("--path.sysfs", args.sysfs), ("--path.procfs", args.procfs)):
        if not Path(path).is_dir():
            raise FleetscopeError(f"{flag} {path}: no such directory")
    if not contract.re_label_name(args.node_label):
        raise FleetscopeError(f"invalid --node.label-name {args.node_label!r}")
    name = args.node_name or os.environ.get("NODE_NAME") or socket.gethostname()
    return NodeContext(
        sysfs=Path(args.sysfs),
        procfs=Path(args.procfs),
        debugfs=Path(args.debugfs),
        node_label=args.node_label,
        node_name=name,
        options=args,
    )


def raise_open_file_limit() -> None:
    """Raise the soft RLIMIT_NOFILE to the hard limit, as Go programs do at start.

    The efa collector keeps its ~1,200 counter files open on a p5.48xlarge; the usual soft limit of
    1024 would otherwise make it fall back to opening each file on every scrape.
    """
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = hard if hard != resource.RLIM_INFINITY else 1 << 20
        if soft != resource.RLIM_INFINITY and soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    except (ImportError, OSError, ValueError) as exc:
        log.debug("could not raise the open-file limit: %s", exc)


def run(args: argparse.Namespace) -> int:
    from fleetscope.exporters.registry import NodeCollector, build_collectors
    from fleetscope.exporters.server import ExporterServer, render_text
    from fleetscope.exporters.webconfig import load_web_config

    web_config = load_web_config(args.web_config_file)
    ctx = node_context(args)
    names = enabled_collectors(args)
    if not args.collector_timeout > 0:
        raise FleetscopeError(f"--collector.timeout must be > 0, not {args.collector_timeout}")
    raise_open_file_limit()
    node = NodeCollector([], timeout=args.collector_timeout)
    try:
        if args.once:
            node.collectors = build_collectors(names, ctx)
            sys.stdout.write(render_text(node).decode())
            return 0
        # Bind first: a port in use is reported before any collector starts (NVML, threads).
        server = ExporterServer(args.listen_address, node, web_config, args.max_connections)
        node.collectors = build_collectors(names, ctx)
        log.info(
            "serving %s://%s/metrics for node %s=%s with collectors %s",
            server.scheme,
            args.listen_address,
            ctx.node_label,
            ctx.node_name,
            ",".join(names) or "(none)",
        )
        stop = threading.Event()

        def _stop(signum: int, _frame: object) -> None:
            log.info("received signal %d, shutting down", signum)
            stop.set()

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
        server.start()
        stop.wait()
        server.shutdown()
        return 0
    finally:
        node.close()
