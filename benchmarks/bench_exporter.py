"""Scrape cost of the node exporter on a p5.48xlarge shape: EFA (32 devices) + Lustre.

    .venv/bin/python benchmarks/bench_exporter.py [--scrapes 300]

Measures, on the committed fixture tree ``tests/fixtures/p5`` (32 EFA devices with ~1,150 counter
files, one non-EFA mlx5 device, one FSx for Lustre mount):

1. in process, a full scrape of the efa and lustre collectors (``NodeCollector``) rendered by
   client_python's ``generate_latest`` and by the exporter's own ``render_text`` (what ``/metrics``
   serves);
2. over HTTP, ``fleetscope exporter`` as a real process on loopback, scraped like Prometheus does
   (``Accept-Encoding: gzip``) and without compression;
3. that process's resident memory (psutil) after the warm-up and after the scrapes.

The fixture lives on an ordinary file system: on a real node each sysfs read runs the kernel's
``show()`` and, once per ``lifespan`` (10 ms), admin commands to the EFA device, so reads there cost
more than here. The numbers are medians and 99th percentiles over ``--scrapes`` scrapes.
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from prometheus_client import CollectorRegistry, generate_latest  # noqa: E402

from fleetscope.exporters.base import NodeContext  # noqa: E402
from fleetscope.exporters.efa import EfaCollector  # noqa: E402
from fleetscope.exporters.registry import NodeCollector, collector_class  # noqa: E402
from fleetscope.exporters.server import render_text  # noqa: E402

TREE = ROOT / "tests" / "fixtures" / "p5"
FLAGS = [
    f"--path.sysfs={TREE / 'sys'}",
    f"--path.procfs={TREE / 'proc'}",
    f"--path.debugfs={TREE / 'sys' / 'kernel' / 'debug'}",
    "--node.name=p5-bench",
    "--collector.disable-defaults",
    "--collector.efa",
    "--collector.lustre",
]


def timed(fn: Callable[[], object], n: int) -> tuple[float, float]:
    """(median, p99) of ``n`` calls, in milliseconds."""
    xs = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        xs.append(time.perf_counter() - start)
    xs.sort()
    return statistics.median(xs) * 1e3, xs[min(len(xs) - 1, int(len(xs) * 0.99))] * 1e3


def in_process(n: int) -> dict[str, tuple[float, float]]:
    ctx = NodeContext(
        sysfs=TREE / "sys", procfs=TREE / "proc", debugfs=TREE / "sys/kernel/debug", node_name="p5"
    )
    node = NodeCollector([EfaCollector(ctx), collector_class("lustre")(ctx)])
    registry = CollectorRegistry(auto_describe=False)
    registry.register(node)  # type: ignore[arg-type]
    for _ in range(20):
        render_text(node)
    samples = sum(len(f.samples) for f in node.collect())
    return {
        f"collect only ({samples} samples)": timed(lambda: [f for f in node.collect()], n),
        "collect + generate_latest": timed(lambda: generate_latest(registry), n),
        "collect + render_text (served)": timed(lambda: render_text(node), n),
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def over_http(n: int) -> tuple[dict[str, tuple[float, float]], dict[str, float]]:
    import psutil

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleetscope", "exporter", f"--web.listen-address=127.0.0.1:{port}", *FLAGS],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(url, timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.1)

        def scrape(gzip: bool) -> None:
            headers = {"Accept-Encoding": "gzip"} if gzip else {}
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as r:
                r.read()

        for _ in range(20):
            scrape(True)
        ps = psutil.Process(proc.pid)
        rss = {"after warm-up": ps.memory_info().rss / 2**20}
        times = {
            "HTTP scrape, gzip (as Prometheus)": timed(lambda: scrape(True), n),
            "HTTP scrape, uncompressed": timed(lambda: scrape(False), n),
        }
        rss[f"after {2 * n + 20} scrapes"] = ps.memory_info().rss / 2**20
        return times, rss
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrapes", type=int, default=300, help="scrapes per measurement (default 300)")
    args = parser.parse_args()
    n = max(200, args.scrapes)
    print(f"machine: {os.cpu_count()} CPUs {platform.machine()}, Python {platform.python_version()}")
    print(f"tree: {TREE.relative_to(ROOT)}, {n} scrapes per line\n")
    print("| measurement | median ms | p99 ms |\n| --- | ---: | ---: |")
    for what, (med, p99) in in_process(n).items():
        print(f"| in process: {what} | {med:.2f} | {p99:.2f} |")
    times, rss = over_http(n)
    for what, (med, p99) in times.items():
        print(f"| {what} | {med:.2f} | {p99:.2f} |")
    print()
    for when, mib in rss.items():
        print(f"exporter RSS {when}: {mib:.1f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
