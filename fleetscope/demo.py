"""``fleetscope demo`` (placeholder until the simulated-cluster demo lands): the exporter on the
bundled p5.48xlarge fixture trees."""

from __future__ import annotations

import argparse
from pathlib import Path

from fleetscope.errors import FleetscopeError

ROOT = Path(__file__).resolve().parent.parent


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--web.listen-address", dest="listen_address", default="127.0.0.1:9401")


def run(args: argparse.Namespace) -> int:
    from fleetscope.cli import main

    tree = ROOT / "tests" / "fixtures" / "p5"
    if not tree.is_dir():
        raise FleetscopeError(f"fixture tree {tree} not found (run from a checkout of fleetscope)")
    print(
        f"fleetscope demo: exporter on the p5.48xlarge fixture tree at http://{args.listen_address}/metrics"
    )
    return main([
        "exporter", f"--web.listen-address={args.listen_address}", f"--path.sysfs={tree}/sys",
        f"--path.procfs={tree}/proc", f"--path.debugfs={tree}/sys/kernel/debug", "--node.name=p5-demo-0",
        "--no-collector.gpu", "--no-collector.xid",
    ])  # fmt: skip
