"""``fleetscope evaluate``: precision, recall and detection delay per kind on simulated scenarios."""

from __future__ import annotations

import argparse
import os
import sys

from fleetscope import strictjson
from fleetscope.argtypes import positive_int


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "folder",
        nargs="?",
        default="tests/fixtures/scenarios",
        help="folder of scenario specs (default tests/fixtures/scenarios)",
    )
    p.add_argument("--json", metavar="FILE", help="also write the full report as JSON here ('-' for stdout)")
    p.add_argument("--config", help="YAML/JSON file of detector thresholds to override")
    p.add_argument("--min-precision", type=float, help="exit 1 when any kind's precision is below this")
    p.add_argument("--min-recall", type=float, help="exit 1 when any kind's recall is below this")
    p.add_argument(
        "--family",
        action="append",
        metavar="NAME",
        help="score only the specs of this family (repeatable; e.g. classic, pipeline, hang)",
    )
    p.add_argument(
        "--goodput",
        action="store_true",
        help="exit 1 when a family's goodput account misses a badput category by more than 2%% of its "
        "GPU-hours, or an account does not sum to its whole",
    )
    p.add_argument(
        "-j",
        "--jobs",
        type=positive_int,
        default=os.cpu_count() or 1,
        help="scenarios evaluated at once, each in its own process (default: the CPU count)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no per-scenario progress lines")


def run(args: argparse.Namespace) -> int:
    from fleetscope.analyzers.config import load_config
    from fleetscope.analyzers.evaluate import evaluate

    progress = None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    report = evaluate(
        args.folder, config=load_config(args.config), progress=progress, families=args.family, jobs=args.jobs
    )
    if args.json == "-":
        print(strictjson.dumps(report.to_dict(), indent=2))
    else:
        sys.stdout.write(report.render())
        if args.json:
            with open(args.json, "w") as fh:
                fh.write(strictjson.dumps(report.to_dict(), indent=2))
    rc = 0
    for kind, k in report.per_kind().items():
        if args.min_precision is not None and k["precision"] < args.min_precision:
            print(f"precision of {kind} {k['precision']:.3f} < {args.min_precision}", file=sys.stderr)
            rc = 1
        if args.min_recall is not None and k["recall"] < args.min_recall:
            print(f"recall of {kind} {k['recall']:.3f} < {args.min_recall}", file=sys.stderr)
            rc = 1
    if args.goodput:
        for fam, g in report.goodput().items():
            if not g["within_bound"]:
                print(f"goodput of family {fam}: a badput category off by more than 2%", file=sys.stderr)
                rc = 1
        if not report.goodput_sums_to_whole():
            print("goodput: an account does not sum to its whole", file=sys.stderr)
            rc = 1
    return rc
