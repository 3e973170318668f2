"""Command-line options shared by several subcommands: how to reach a Prometheus-compatible API,
and the progress bar.

``analyze``, ``record``, ``serve`` and ``plan`` add the same Prometheus access flags
(:func:`add_prometheus_access`) and read them back the same way, as one
:class:`~fleetscope.window.prometheus.PrometheusAccess` (:func:`prometheus_access`). A command-line
module (the top layer, tests/test_import_graph.py): it imports the window layer only to build that
value, and only when a command runs.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from fleetscope.argtypes import positive_int
from fleetscope.defaults import MAX_ANSWER_BYTES
from fleetscope.errors import FleetscopeError

if TYPE_CHECKING:
    from fleetscope.window.prometheus import PrometheusAccess

#: The default of --max-answer-bytes (the loader's: :mod:`fleetscope.defaults`).
DEFAULT_MAX_ANSWER_BYTES = MAX_ANSWER_BYTES


def add_prometheus_access(p: argparse.ArgumentParser) -> None:
    """How to reach a Prometheus-compatible API: answer size, SigV4 and headers.

    Shared by ``analyze``, ``record``, ``serve`` and ``plan`` (read back by :func:`prometheus_access`).
    """
    p.add_argument(
        "--max-answer-bytes",
        type=positive_int,
        default=DEFAULT_MAX_ANSWER_BYTES,
        metavar="N",
        help=f"largest Prometheus answer read, in bytes (default {DEFAULT_MAX_ANSWER_BYTES >> 20} MiB)",
    )
    p.add_argument(
        "--sigv4", action="store_true", help="sign requests with AWS SigV4 (Amazon Managed Prometheus)"
    )
    p.add_argument("--region", help="AWS region for SigV4 (implies --sigv4)")
    p.add_argument(
        "--header", action="append", default=[], metavar="K=V", help="extra HTTP header (repeatable)"
    )


def prometheus_access(args: argparse.Namespace, url: str) -> PrometheusAccess:
    """The access to ``url`` from ``--timeout`` and ``--sigv4/--region/--header/--max-answer-bytes``:
    the SigV4 region (None: unsigned) and extra headers.

    Shared by ``analyze``, ``record``, ``serve`` and ``plan``.
    """
    from fleetscope.window.prometheus import PrometheusAccess

    headers: dict[str, str] = {}
    for h in args.header:
        k, sep, v = h.partition("=")
        if not sep or not k.strip():
            raise FleetscopeError(f"--header {h!r}: expected K=V")
        headers[k.strip()] = v.strip()
    region = args.region
    if args.sigv4 and not region:
        import botocore.session

        region = botocore.session.Session().get_config_variable("region")
        if not region:
            raise FleetscopeError("--sigv4 needs --region (or AWS_REGION)")
    return PrometheusAccess(
        url,
        timeout=args.timeout,
        sigv4_region=region,
        headers=headers,
        max_answer_bytes=args.max_answer_bytes or MAX_ANSWER_BYTES,
    )


#: The exit status of a command ended by SIGTERM (128 + 15, as a shell reports it).
SIGTERM_EXIT = 128 + signal.SIGTERM


@contextlib.contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """While inside, SIGTERM raises ``SystemExit(143)`` in the main thread instead of ending the
    process on the spot, so ``finally`` blocks and ``with`` exits run: a streamed ``analyze``
    removes its temporary folder, a ``record`` its temporary file. Outside the main thread (where
    no handler can be set) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _exit(signum: int, frame: object) -> None:
        raise SystemExit(SIGTERM_EXIT)

    previous = signal.signal(signal.SIGTERM, _exit)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def show_progress(args: argparse.Namespace) -> bool:
    """``--progress/--no-progress``; by default, whether stderr is a terminal."""
    return args.progress if args.progress is not None else sys.stderr.isatty()


class ProgressBar:
    """A one-line progress bar on stderr."""

    def __init__(self, label: str, enabled: bool) -> None:
        self.label = label
        self.enabled = enabled
        self.last = -1

    def __call__(self, frac: float) -> None:
        if not self.enabled:
            return
        pct = int(frac * 100)
        if pct == self.last:
            return
        self.last = pct
        bar = "#" * (pct // 4)
        sys.stderr.write(f"\r{self.label} [{bar:<25}] {pct:3d}%")
        if pct >= 100:
            sys.stderr.write("\n")
        sys.stderr.flush()
