"""``fleetscope serve``: the live analysis service.

Flags (kept stable; ``fleetscope demo`` builds on them):
``--prometheus URL`` (required), ``--listen HOST:PORT`` (default 127.0.0.1:9410), ``--interval S``,
``--window S``, ``--step S``, ``--timeout S``, ``--stale-after S``, ``--token-file FILE`` (or the
``FLEETSCOPE_TOKEN`` environment variable), ``--scheduler slurm|kubernetes``, ``--max-fraction F``,
``--config FILE``, ``--sigv4``, ``--region R``, ``--header K=V``, ``--in-process``,
``--shard K/N|auto`` and ``--shards N`` (one replica's share of the fleet: fleetscope/service/shard.py).
"""

from __future__ import annotations

import argparse
import logging
import socket
from urllib.parse import urlsplit

from fleetscope.argtypes import fraction, non_negative_float, positive_float
from fleetscope.defaults import SERVICE_PORT
from fleetscope.errors import FleetscopeError
from fleetscope.options_cli import add_prometheus_access

log = logging.getLogger(__name__)

#: Kept under the short name the service CLIs use.
positive = positive_float
__all__ = ["fraction", "positive"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--prometheus", required=True, metavar="URL", help="Prometheus-compatible API base URL"
    )
    parser.add_argument(
        "--listen",
        default=f"127.0.0.1:{SERVICE_PORT}",
        metavar="HOST:PORT",
        help=f"address to serve on (default 127.0.0.1:{SERVICE_PORT})",
    )
    parser.add_argument(
        "--interval", type=positive, default=30.0, metavar="S", help="seconds between analyses (30)"
    )
    parser.add_argument(
        "--window", type=positive, default=1800.0, metavar="S", help="seconds of history analyzed (1800)"
    )
    parser.add_argument(
        "--step", type=positive, default=15.0, metavar="S", help="query resolution in seconds (15)"
    )
    parser.add_argument(
        "--timeout",
        type=positive,
        default=30.0,
        metavar="S",
        help="seconds the Prometheus queries of one cycle may take together, retries and answers included "
        "(30)",
    )
    parser.add_argument(
        "--refetch",
        type=non_negative_float,
        default=120.0,
        metavar="S",
        help="seconds at the window's end fetched again every cycle, for samples that arrive late; "
        "raise it past the remote-write lag of the store (120; 0 re-fetches only the last two steps)",
    )
    parser.add_argument(
        "--stale-after",
        type=positive,
        default=None,
        metavar="S",
        help="verdicts older than this are stale (default 3 intervals + 10 s)",
    )
    parser.add_argument(
        "--token-file", metavar="FILE", help="require this bearer token (else $FLEETSCOPE_TOKEN; none: open)"
    )
    parser.add_argument(
        "--scheduler", choices=["slurm", "kubernetes"], default="slurm", help="for /api/v1/plan"
    )
    parser.add_argument(
        "--max-fraction",
        type=fraction,
        default=None,
        metavar="F",
        help="drain at most this fraction of the nodes at once, rounded down but at least 1 (0.1; 0: drain "
        "none)",
    )
    add_prometheus_options(parser)
    parser.add_argument(
        "--shard",
        metavar="K/N|auto",
        help="analyze only shard K of N of the fleet's jobs, models and nodes (auto: K from the "
        "host name's -K suffix, a StatefulSet pod's ordinal; N from --shards or $FLEETSCOPE_SHARDS)",
    )
    parser.add_argument("--shards", metavar="N", help="the shard count for --shard auto")
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="analyze in a thread of the server process instead of a child process (debugging)",
    )


def add_prometheus_options(parser: argparse.ArgumentParser) -> None:
    """The analyzers' options, as ``fleetscope analyze`` spells them."""
    parser.add_argument(
        "--config", metavar="FILE", help="YAML/JSON of detector thresholds (see docs/analyzers.md)"
    )
    add_prometheus_access(parser)


def parse_listen(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) <= 65535:
        raise FleetscopeError(f"invalid --listen {address!r}: expected HOST:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


def check_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise FleetscopeError(f"invalid --prometheus {url!r}: expected http(s)://host:port")
    return url.rstrip("/")


def run(args: argparse.Namespace) -> int:
    url = check_url(args.prometheus)
    host, port = parse_listen(args.listen)
    shard = None
    if args.shard is not None:
        from fleetscope.service.shard import parse_shard

        shard = parse_shard(args.shard, args.shards)
    elif args.shards is not None:
        raise FleetscopeError("--shards is for --shard auto", exit_code=2)
    # Heavy imports only once the arguments are known to be good.
    import uvicorn

    from fleetscope.analyzers.config import load_config
    from fleetscope.analyzers.core import LOADED
    from fleetscope.options_cli import prometheus_access
    from fleetscope.service.app import ServiceSettings, create_app
    from fleetscope.service.auth import load_token
    from fleetscope.service.isolate import ProcessAnalyze
    from fleetscope.service.live import LiveAnalysis
    from fleetscope.service.plan import DEFAULT_MAX_FRACTION
    from fleetscope.service.runner import AnalyzeFn
    from fleetscope.service.server import server_options
    from fleetscope.window.sources import PrometheusSource

    token = load_token(args.token_file)
    if token is None and host not in ("127.0.0.1", "::1", "localhost"):
        log.warning("serving on %s without a token: anyone who can reach it can read the verdicts", host)
    settings = ServiceSettings(
        prometheus=url,
        interval=args.interval,
        window=args.window,
        stale_after=args.stale_after,
        token=token,
        scheduler=args.scheduler,
        max_fraction=DEFAULT_MAX_FRACTION if args.max_fraction is None else args.max_fraction,
        shard=None if shard is None else (shard.index, shard.count),
    )

    # Picklable, so it can run in the child process, which holds it (and its source's window)
    # between cycles: a sliding source fetches only what is new.
    source = PrometheusSource(prometheus_access(args, url), LOADED, sliding=True, refetch_s=args.refetch)
    config = load_config(args.config)
    # One cycle: the report, the jobs' states and the served models (from the window's signals, in
    # the child), and with a shard, the analysis of a source restricted to its nodes.
    analyze: AnalyzeFn = LiveAnalysis(source, config, args.step, shard)
    sock = bind(host, port)
    app = create_app(settings, analyze if args.in_process else ProcessAnalyze(analyze))
    server = uvicorn.Config(app, **server_options(token))
    log.info(
        "fleetscope serve on http://%s:%d, analyzing %s every %gs%s",
        host,
        port,
        url,
        args.interval,
        f", shard {shard}" if shard else "",
    )
    uvicorn.Server(server).run(sockets=[sock])
    return 0


def bind(host: str, port: int) -> socket.socket:
    """Bind before starting uvicorn, so a busy port is one clear error line, not a log and exit."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise FleetscopeError(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock
