"""How long one scrape of the ``lustre`` collector takes on the fixture trees.

    .venv/bin/python benchmarks/bench_lustre.py [--iterations 2000]

Times ``LustreCollector.collect()`` (list the llite instances, read and parse each ``stats``, read
``health_check``, build the families; the mount table is cached as in the exporter) and, for the
p5 tree, the same plus rendering in the Prometheus text format. Prints median and p99 in ms.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from prometheus_client import CollectorRegistry, generate_latest  # noqa: E402

from fleetscope.exporters.base import NodeContext  # noqa: E402
from fleetscope.exporters.lustre import LustreCollector  # noqa: E402
from fleetscope.exporters.registry import NodeCollector  # noqa: E402

TREES = {
    "p5 (2.15, 1 FSx mount)": ROOT / "tests/fixtures/p5",
    "2.15 (2 FSx mounts)": ROOT / "tests/fixtures/lustre/2.15",
    "2.10 (procfs, 1 mount)": ROOT / "tests/fixtures/lustre/2.10",
}


def ctx(root: Path) -> NodeContext:
    return NodeContext(
        sysfs=root / "sys", procfs=root / "proc", debugfs=root / "sys/kernel/debug", node_name="n"
    )


def timed(fn, iterations: int) -> tuple[float, float]:
    for _ in range(50):
        fn()
    runs = []
    for _ in range(iterations):
        t = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t)
    runs.sort()
    return statistics.median(runs) * 1e3, runs[int(len(runs) * 0.99) - 1] * 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=2000)
    n = parser.parse_args().iterations
    for label, root in TREES.items():
        collector = LustreCollector(ctx(root))
        median, p99 = timed(lambda c=collector: list(c.collect()), n)
        print(f"collect   {label:<24} median {median:.3f} ms  p99 {p99:.3f} ms")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeCollector([LustreCollector(ctx(TREES["p5 (2.15, 1 FSx mount)"]))]))  # type: ignore[arg-type]
    median, p99 = timed(lambda: generate_latest(registry), n)
    print(f"collect+render p5 text format          median {median:.3f} ms  p99 {p99:.3f} ms")


if __name__ == "__main__":
    main()
