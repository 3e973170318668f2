"""``fleetscope``: one command, a subcommand per job.

Each subcommand lives in its own module, which exposes ``add_arguments(parser)`` and
``run(args) -> int``. Modules are imported only when their subcommand runs, so ``fleetscope
exporter`` never imports pandas, FastAPI or grafanalib, and one broken optional dependency does not
break the other subcommands. A :class:`~fleetscope.errors.FleetscopeError` becomes one clear line
on stderr and a non-zero exit code; so does a missing optional dependency.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from fleetscope import __version__
from fleetscope.errors import FleetscopeError

#: subcommand -> (module, one-line help). The module must keep its top-level imports light.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "exporter": ("fleetscope.exporters.cli", "run the node exporter (GPU, XID, EFA, Lustre, training)"),
    "record-gpu": ("fleetscope.exporters.gpu.record_cli", "record every NVML answer of this machine into a "
                                                          "JSON fixture"),
    "generate": ("fleetscope.generate", "write the Prometheus rules and Grafana dashboards (--check: fail if "
                                        "stale)"),
    "simulate": ("fleetscope.simulate.cli", "simulate a GPU or Trainium cluster training or serving (vLLM): "
                                            "recorded series or live /metrics, with faults"),
    "analyze": ("fleetscope.analyzers.cli", "find failing nodes, stragglers, hangs, MFU drops, goodput and "
                                            "inference SLO burn in recorded or live series"),
    "record": ("fleetscope.analyzers.record_cli", "archive a Prometheus window or a recording as one Parquet "
                                                  "file for analyze"),
    "hang": ("fleetscope.hang.cli", "name the ranks a hung collective waits for, from PyTorch Flight "
                                    "Recorder dumps and NCCL RAS reports, with the nodes' hardware evidence"),
    "evaluate": ("fleetscope.analyzers.evaluate_cli", "score the detectors against simulated scenarios"),
    "serve": ("fleetscope.service.cli", "run the live analysis service (API, web page, verdict metrics)"),
    "plan": ("fleetscope.service.plan_cli", "turn failing-node findings into drain commands (at most max(1, "
                                            "floor(F x nodes)) at once; prints, runs nothing without "
                                            "--execute)"),
    "demo": ("fleetscope.demo.cli", "run a simulated cluster with Prometheus and the live service"),
}  # fmt: skip


def _load(module: str):
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("fleetscope"):
            raise FleetscopeError(f"this subcommand is not available in this build ({exc.name})") from None
        raise FleetscopeError(
            f"missing dependency '{exc.name}'; install the extra that provides it, "
            f"e.g. pip install 'fleetscope[all]'"
        ) from None


def build_parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fleetscope",
        description="Observability and cluster health for GPU and Trainium fleets, training and inference.",
    )
    parser.add_argument("--version", action="version", version=f"fleetscope {__version__}")
    parser.add_argument(
        "--log.level",
        dest="log_level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="log level (default: info)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    # Only the chosen subcommand's module is imported; the others appear in --help by name.
    chosen = next((a for a in argv if a in SUBCOMMANDS), None)
    for name, (module, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:
            mod = _load(module)
            mod.add_arguments(p)
            p.set_defaults(_run=mod.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser(argv)
        args = parser.parse_args(argv)
        logging.basicConfig(
            level=getattr(logging, args.log_level.upper()),
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
        if not getattr(args, "_run", None):
            parser.print_help()
            return 2
        return int(args._run(args) or 0)
    except FleetscopeError as exc:
        print(f"fleetscope: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
