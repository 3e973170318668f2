"""``fleetscope plan``: print the drain commands for the failing nodes; run them only with --execute.

Sources: ``--prometheus URL`` (analyzes the last ``--window`` seconds), or ``--input FILE``: either the
JSON of ``fleetscope analyze --format json`` (then ``--cluster-size`` says how many nodes the cluster
has, unless the document lists its nodes) or a recorded OpenMetrics file (analyzed here).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from fleetscope import strictjson
from fleetscope.errors import FleetscopeError
from fleetscope.options_cli import prometheus_access
from fleetscope.service.cli import add_prometheus_options, check_url, fraction, positive

if TYPE_CHECKING:
    from fleetscope.analyzers.report import Report
    from fleetscope.window.prometheus import PrometheusAccess


def add_arguments(parser: argparse.ArgumentParser) -> None:
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--prometheus", metavar="URL", help="analyze the last --window seconds of this Prometheus"
    )
    src.add_argument(
        "--input", metavar="FILE", help="findings JSON (fleetscope analyze --format json) or a recording"
    )
    parser.add_argument(
        "--window", type=positive, default=1800.0, metavar="S", help="seconds analyzed (1800)"
    )
    parser.add_argument("--step", type=positive, default=15.0, metavar="S", help="query resolution (15)")
    parser.add_argument(
        "--timeout", type=positive, default=30.0, metavar="S", help="Prometheus request timeout (30)"
    )
    parser.add_argument(
        "--cluster-size", type=int, metavar="N", help="nodes in the cluster (for findings JSON input)"
    )
    parser.add_argument(
        "--scheduler",
        choices=["slurm", "kubernetes"],
        default="slurm",
        help="commands to print: scontrol drain (slurm, the default) or kubectl cordon and taint",
    )
    parser.add_argument(
        "--max-fraction",
        type=fraction,
        default=None,
        metavar="F",
        help="drain at most this fraction of the nodes at once, rounded down but at least 1 (0.1; 0: drain "
        "none)",
    )
    parser.add_argument(
        "--format",
        choices=["text", "json"],
        default="text",
        help="text: a commented shell script (default); json: the plan with argv lists",
    )
    add_prometheus_options(parser)
    parser.add_argument(
        "--execute",
        action="store_true",
        help="run the commands (as argument lists, no shell); without it nothing is run",
    )


def _from_findings_json(doc: object, cluster_size: int | None, path: Path):
    from fleetscope.analyzers.findings import Finding
    from fleetscope.service.plan import candidates_from

    if not isinstance(doc, dict) or not isinstance(doc.get("findings"), list):
        raise FleetscopeError(f"{path}: expected a findings document with a 'findings' list")
    try:
        findings = [Finding.from_dict(d) for d in doc["findings"]]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise FleetscopeError(f"{path}: malformed finding ({type(exc).__name__}: {exc})") from None
    for k, f in enumerate(findings):
        texts = (f.kind, f.severity, f.cause, f.action)
        if not all(isinstance(t, str) for t in texts) or not isinstance(f.node, str | None):
            raise FleetscopeError(
                f"{path}: finding {k}: kind, severity, node, cause and action must be strings"
            )
        if f.gpu is not None and not isinstance(f.gpu, str | int):
            raise FleetscopeError(f"{path}: finding {k}: gpu must be a string or a number")
    listed = doc.get("nodes")
    if cluster_size is None and isinstance(listed, list | dict):
        cluster_size = len(listed)
    if cluster_size is None:
        raise FleetscopeError(f"{path} does not list the cluster's nodes; pass --cluster-size N")
    if cluster_size < 1:
        raise FleetscopeError(f"--cluster-size must be >= 1, got {cluster_size}")
    return candidates_from(findings), cluster_size


def build(args: argparse.Namespace):
    from fleetscope.service.plan import DEFAULT_MAX_FRACTION, build_plan, plan_from_analysis

    max_fraction = DEFAULT_MAX_FRACTION if args.max_fraction is None else args.max_fraction
    if args.prometheus:
        end = time.time()
        access = prometheus_access(args, check_url(args.prometheus))
        analysis = _analyze(None, access, args.config, start=end - args.window, end=end, step=args.step)
        return plan_from_analysis(analysis, args.scheduler, max_fraction)
    path = Path(args.input)
    if not path.is_file():
        raise FleetscopeError(f"--input {path}: no such file")
    head = path.read_bytes()[:64].lstrip()
    if head.startswith(b"{"):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise FleetscopeError(f"{path}: not valid JSON ({exc})") from None
        candidates, size = _from_findings_json(doc, args.cluster_size, path)
        return build_plan(candidates, size, args.scheduler, max_fraction)
    return plan_from_analysis(_analyze(path, None, args.config), args.scheduler, max_fraction)


def _analyze(
    path: Path | None,
    access: PrometheusAccess | None,
    config: str | None,
    start: float | None = None,
    end: float | None = None,
    step: float | None = None,
) -> Report:
    """The report of the recording, archive or Prometheus window the plan is made from: the same
    door as ``fleetscope analyze`` (so a long window streams)."""
    from fleetscope.analyzers.analyze_source import analyze_source
    from fleetscope.analyzers.config import load_config
    from fleetscope.analyzers.core import LOADED
    from fleetscope.window.sources import open_source

    source = open_source(path, access, LOADED)
    return analyze_source(source, load_config(config), start=start, end=end, step=step)


def run(args: argparse.Namespace) -> int:
    from fleetscope.service.plan import execute

    plan = build(args)
    if args.format == "json":
        print(strictjson.dumps(plan.to_dict(), indent=2))
    else:
        sys.stdout.write(plan.script())
    if not args.execute:
        return 0
    results = execute(plan)
    failed = [r for r in results if r.returncode != 0]
    for r in results:
        mark = "ok" if r.returncode == 0 else f"FAILED ({r.returncode})"
        print(
            f"# ran: {' '.join(r.argv)} -> {mark}{': ' + r.output if r.output and r.returncode else ''}",
            file=sys.stderr,
        )
    if failed:
        raise FleetscopeError(f"{len(failed)} of {len(results)} drain commands failed")
    return 0
