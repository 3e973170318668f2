"""``fleetscope analyze``: failing nodes, stragglers and MFU drops in a recorded file or a Prometheus.

``--input FILE`` and ``--prometheus URL --start T --end T`` load the same frames and give the same
findings. Output: ``text`` (default on a terminal), ``json`` (the findings document, docs/design.md#findings,
default otherwise), ``html`` (one self-contained report with plots).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from fleetscope.argtypes import positive_float
from fleetscope.errors import FleetscopeError
from fleetscope.options_cli import (
    ProgressBar,
    add_prometheus_access,
    prometheus_access,
    show_progress,
    sigterm_unwinds,
)

if TYPE_CHECKING:
    from fleetscope.analyzers.report import Report
    from fleetscope.hang.model import HangResult


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--input",
        "-i",
        metavar="FILE",
        help="recorded OpenMetrics file (gzip allowed) or a fleetscope record Parquet archive",
    )
    src.add_argument("--prometheus", metavar="URL", help="Prometheus-compatible API base URL")
    p.add_argument(
        "--start",
        help="window start: RFC 3339, Unix seconds, or relative (--start=-6h); default -1h "
        "(with --input: the file's first sample)",
    )
    p.add_argument("--end", help="window end (default now; with --input: the file's last sample)")
    p.add_argument(
        "--step", type=float, help="grid step in seconds (default 15; with --input: the file's spacing)"
    )
    p.add_argument(
        "--format",
        choices=["text", "json", "html"],
        help="output format (default text on a terminal, json otherwise)",
    )
    p.add_argument("--output", "-o", help="write the report here instead of stdout")
    p.add_argument(
        "--config", help="YAML/JSON file of detector thresholds to override (see docs/analyzers.md)"
    )
    p.add_argument(
        "--timeout",
        type=positive_float,
        default=30.0,
        help="seconds the whole Prometheus load may take, all queries and answers together (default 30)",
    )
    add_prometheus_access(p)
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show a progress bar on stderr (default: when stderr is a terminal)",
    )
    p.add_argument(
        "--chunk",
        metavar="DURATION",
        default="auto",
        help="analyze the window in time chunks of this length (e.g. 1h), holding one chunk "
        "in memory at a time, with the same findings (docs/analyzers.md#streaming); "
        "'auto' (default): 1h chunks for a window longer than 2h (a recording is "
        "parsed once and spooled to $TMPDIR first); 'off': in one piece",
    )
    p.add_argument(
        "--flight-recorder",
        metavar="DIR",
        action="append",
        default=[],
        help="a directory of the job's PyTorch Flight Recorder dumps: add the hangs it proves, "
        "joined to node and GPU (docs/hang.md; repeatable)",
    )
    p.add_argument(
        "--nccl-ras",
        metavar="FILE",
        action="append",
        default=[],
        help="an NCCL RAS report (ncclras -f json, text, or polls): add its hangs (repeatable)",
    )
    p.add_argument(
        "--job", metavar="ID", help="the job_id the dumps and RAS reports are of (default: the only job)"
    )
    p.add_argument(
        "--prefetch",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="streamed: load the next chunk while this one is analyzed (about 1.4x faster "
        "on two cores, two chunks in memory at the peak instead of one; default: for "
        "windows of more than 4 chunks)",
    )


def run(args: argparse.Namespace) -> int:
    from fleetscope.analyzers.analyze_source import analyze_source
    from fleetscope.analyzers.config import load_config
    from fleetscope.analyzers.core import LOADED
    from fleetscope.times import parse_time
    from fleetscope.window.sources import open_source

    config = load_config(args.config)
    show = show_progress(args)
    t0 = time.monotonic()
    access = prometheus_access(args, args.prometheus) if args.prometheus else None
    source = open_source(args.input, access, LOADED)
    with sigterm_unwinds():  # a streamed analysis's temporary folder goes with it
        report = analyze_source(
            source,
            config,
            lambda label: ProgressBar(label, show),
            start=parse_time(args.start) if args.start else None,
            end=parse_time(args.end) if args.end else None,
            step=args.step,
            chunk=args.chunk,
            prefetch=args.prefetch,
        )
        hangs = None
        if args.flight_recorder or args.nccl_ras:
            from fleetscope.analyzers.hang_join import hangs_for_analyze

            paths = args.flight_recorder + args.nccl_ras
            hangs = hangs_for_analyze(paths, args.input, access, args.job, report.start, report.end)
        return _write(args, report, show, t0, hangs)


def _write(
    args: argparse.Namespace, report: Report, show: bool, t0: float, hangs: HangResult | None = None
) -> int:
    fmt = args.format or ("text" if sys.stdout.isatty() and not args.output else "json")
    if fmt == "json":
        from fleetscope import strictjson

        text = strictjson.dumps(report.document(), indent=2) + "\n"  # no NaN/Infinity: null + a note
    elif fmt == "html":
        from fleetscope.analyzers.report_html import render_html

        text = render_html(report)
    else:
        from fleetscope.analyzers.report_text import render_text

        text = render_text(report)
    if hangs is not None:
        from fleetscope.hang.render import with_hangs

        text = with_hangs(text, fmt, hangs)
    if args.output:
        from fleetscope.atomicfile import write_text_atomic

        try:
            write_text_atomic(args.output, text)  # a full disk never leaves half a report
        except OSError as exc:
            raise FleetscopeError(f"cannot write {args.output}: {exc.strerror}") from None
    else:
        sys.stdout.write(text)
    if show:
        print(f"analyzed in {time.monotonic() - t0:.1f} s", file=sys.stderr)
    return 0
