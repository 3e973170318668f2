"""Exporter CPU per scrape of the gpu collector on 8 recorded GPUs (the 8xH100 NVML replay).

    .venv/bin/python benchmarks/bench_gpu.py [--scrapes 300] [--fixture tests/fixtures/nvml/h100x8.json]

Measures process CPU time (all threads: the per-GPU deadline workers do the reading) of one full
scrape: collect() through the NodeCollector and the exporter's text encoder (``render_text``, what
/metrics serves), next to client_python's ``generate_latest`` and collect() alone. The
replay backend answers from memory, so NVML's own latency is excluded; what is left is the
exporter's work (calls, unit conversion, labels, exposition). Prints median and p95 per scrape.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scrapes", type=int, default=300)
    p.add_argument("--fixture", default=str(ROOT / "tests" / "fixtures" / "nvml" / "h100x8.json"))
    args = p.parse_args()

    from prometheus_client import CollectorRegistry, generate_latest

    from fleetscope.exporters.base import NodeContext
    from fleetscope.exporters.gpu.collector import GpuCollector
    from fleetscope.exporters.registry import NodeCollector
    from fleetscope.exporters.server import render_text

    options = argparse.Namespace(gpu_nvml_replay=args.fixture, gpu_nvml_timeout=2.0)
    node = NodeCollector([GpuCollector(NodeContext(node_name="bench-node", options=options))])
    registry = CollectorRegistry(auto_describe=False)
    registry.register(node)  # type: ignore[arg-type]
    for _ in range(20):  # warm up: discovery, NotSupported cache, GPM baseline
        body = generate_latest(registry)
    print(f"fixture: {Path(args.fixture).name}, scrapes: {args.scrapes}")
    for label, fn in (
        ("collect + render_text (what /metrics serves)", lambda: render_text(node)),
        ("collect + client_python generate_latest", lambda: generate_latest(registry)),
        ("collect() only", lambda: list(node.collect())),
    ):
        cpu, wall = [], []
        for _ in range(args.scrapes):
            c0, w0 = time.process_time(), time.perf_counter()
            body = fn()
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - w0)
        cpu.sort()
        wall.sort()
        if isinstance(body, bytes):
            series = sum(1 for line in body.decode().splitlines() if line and not line.startswith("#"))
            label += f", {series} series"
        print(
            f"{label}: CPU median {statistics.median(cpu) * 1e3:.2f} ms, p95 "
            f"{cpu[int(len(cpu) * 0.95)] * 1e3:.2f} ms; wall median {statistics.median(wall) * 1e3:.2f} ms"
        )
    node.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
