"""``fleetscope record``: a Prometheus window or a recording into one Parquet incident archive.

The archive's format, writer and reader are :mod:`fleetscope.window.archive`; this module is the
subcommand only: its flags, and which series to keep (those the analyzers read, :data:`LOADED`).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from fleetscope.argtypes import positive_float
from fleetscope.errors import FleetscopeError
from fleetscope.options_cli import (
    ProgressBar,
    add_prometheus_access,
    prometheus_access,
    show_progress,
    sigterm_unwinds,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Export a window from a Prometheus-compatible API, or convert a recorded OpenMetrics file, into "
        "one Parquet archive that `fleetscope analyze --input` reads."
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--input", "-i", metavar="FILE", help="recorded OpenMetrics file (gzip allowed)")
    src.add_argument("--prometheus", metavar="URL", help="Prometheus-compatible API base URL")
    p.add_argument("--output", "-o", required=True, metavar="FILE.parquet", help="the archive to write")
    p.add_argument(
        "--start",
        help="window start: RFC 3339, Unix seconds, or relative (--start=-6h); default -1h "
        "(with --input: the file's first sample)",
    )
    p.add_argument("--end", help="window end (default now; with --input: the file's last sample)")
    p.add_argument(
        "--step", type=positive_float, default=15.0, help="--prometheus: grid step in seconds (default 15)"
    )
    p.add_argument(
        "--chunk",
        metavar="DURATION",
        default="1h",
        help="--prometheus: export the window in pieces of this length, holding one at a time "
        "(default 1h; 'off': one piece)",
    )
    p.add_argument(
        "--all-series",
        action="store_true",
        help="--input: keep every series of the file, not only those the analyzers read",
    )
    p.add_argument(
        "--timeout",
        type=positive_float,
        default=30.0,
        help="seconds the Prometheus queries of one piece (--chunk) may take together, answers included "
        "(default 30)",
    )
    add_prometheus_access(p)
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show a progress bar on stderr (default: when stderr is a terminal)",
    )


def run(args: argparse.Namespace) -> int:
    with sigterm_unwinds():  # the temporary archive goes with it
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from fleetscope.analyzers.core import LOADED
    from fleetscope.times import parse_duration, parse_time
    from fleetscope.window.archive.format import pyarrow_modules
    from fleetscope.window.archive.write import convert_recording, export_prometheus

    pyarrow_modules()  # fail before any work when the extra is missing
    out = Path(args.output)
    show = show_progress(args)
    t0 = time.monotonic()
    if args.input:
        stats = convert_recording(
            args.input,
            out,
            None if args.all_series else LOADED,
            window=_window(args),
            progress=ProgressBar("recording", show),
        )
    elif args.prometheus:
        start, end = parse_time(args.start or "-1h"), parse_time(args.end or "now")
        piece = None if args.chunk == "off" else parse_duration(args.chunk)
        if piece is not None and piece <= 0:
            raise FleetscopeError(f"--chunk {args.chunk}: give a duration such as 1h, or off")
        stats = export_prometheus(
            prometheus_access(args, args.prometheus),
            out,
            start,
            end,
            args.step,
            LOADED,
            piece_s=piece,
            progress=ProgressBar("exporting", show),
        )
    else:
        raise FleetscopeError("give --input FILE or --prometheus URL")
    print(
        f"wrote {out}: {stats['rows']:,} samples of {stats['series']:,} series ({stats['metrics']} metrics), "
        f"{out.stat().st_size / 1e6:.1f} MB in {time.monotonic() - t0:.1f} s",
        file=sys.stderr,
    )
    return 0


def _window(args: argparse.Namespace) -> tuple[float, float] | None:
    """--start/--end of ``record --input``: the samples kept, with LOOKBACK_MARGIN_S before the
    start for the grid rule (None: all)."""
    from fleetscope.times import parse_time
    from fleetscope.window.archive.format import LOOKBACK_MARGIN_S

    if not (args.start or args.end):
        return None
    lo = parse_time(args.start) - LOOKBACK_MARGIN_S if args.start else float("-inf")
    hi = parse_time(args.end) if args.end else float("inf")
    return lo, hi
