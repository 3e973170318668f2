"""``fleetscope hang``: the ranks a hung collective waits for, from Flight Recorder dumps and NCCL
RAS reports, optionally joined to the nodes' hardware evidence (docs/hang.md).

Top-level imports stay light (the standard library and base modules); the join to Prometheus or
a recording is imported only when ``--prometheus``/``--input`` is given.
"""

from __future__ import annotations

import argparse
import sys

from fleetscope.argtypes import positive_float
from fleetscope.errors import FleetscopeError
from fleetscope.options_cli import add_prometheus_access, prometheus_access


def _confirm(text: str) -> float:
    from fleetscope.times import parse_duration

    try:
        return parse_duration(text)
    except FleetscopeError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="a directory of per-rank PyTorch Flight Recorder dumps (any prefix, pickle or JSON), "
        "or an NCCL RAS report file (ncclras -f json, the text report, or successive polls)",
    )
    p.add_argument(
        "--format", choices=["text", "json", "html"], default="text", help="output format (default text)"
    )
    p.add_argument("--output", "-o", metavar="FILE", help="write the result here instead of stdout")
    p.add_argument(
        "--confirm",
        type=_confirm,
        default=60.0,
        metavar="DURATION",
        help="how long a RAS skew must stay frozen across polls to be a confirmed hang rather than a "
        "suspect (e.g. 90s, 2m; default 1m)",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--prometheus",
        metavar="URL",
        help="Prometheus-compatible API to map ranks to nodes and read hardware",
    )
    src.add_argument(
        "--input", "-i", metavar="RECORDING", help="a recording or fleetscope record archive of the same job"
    )
    p.add_argument("--job", metavar="ID", help="the job's training job_id (default: the window's only job)")
    p.add_argument(
        "--start", help="window start for the hardware join (RFC 3339, Unix s or -1h; default -1h)"
    )
    p.add_argument(
        "--end", help="window end for the hardware join (default now; with --input: the file's end)"
    )
    p.add_argument(
        "--timeout",
        type=positive_float,
        default=30.0,
        help="seconds the Prometheus load may take (default 30)",
    )
    add_prometheus_access(p)


def run(args: argparse.Namespace) -> int:
    from fleetscope.hang.analysis import analyze_paths
    from fleetscope.hang.render import render

    result = analyze_paths(list(args.paths), confirm_s=args.confirm)
    if args.prometheus or args.input:
        from fleetscope.analyzers.hang_join import load_and_join
        from fleetscope.times import parse_time

        access = prometheus_access(args, args.prometheus) if args.prometheus else None
        start = parse_time(args.start) if args.start else (parse_time("-1h") if args.prometheus else None)
        end = parse_time(args.end) if args.end else (parse_time("now") if args.prometheus else None)
        load_and_join(result, args.input, access, args.job, start, end)
    for note in result.notes:
        if "not used" in note or "read the other ranks" in note or "no such file" in note:
            print(f"fleetscope hang: {note}", file=sys.stderr)
    text = render(result, args.format)
    if args.output:
        from fleetscope.atomicfile import write_text_atomic

        try:
            write_text_atomic(args.output, text)
        except OSError as exc:
            raise FleetscopeError(f"cannot write {args.output}: {exc.strerror}") from None
    else:
        sys.stdout.write(text)
    return 0
