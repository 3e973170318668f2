"""Benchmark of the sharded live service (docs/benchmarks.md, "Sharded service: the ladder").

A simulated fleet (``--nodes`` x 8 GPUs, jobs of ``--job-nodes`` nodes each, the rest job-less,
a GPU throttling in the first job) is recorded for ``--minutes`` + the sliding cycles, backfilled
into a real Prometheus, and for each shard count N of ``--ladder`` one shard is measured (the one
owning the most nodes; this 2-core machine runs one at a time): a first cycle over the 30-minute
window, then ``--repeats`` cycles each ``--sliding`` seconds later, each cycle the service's own
(the discovery query, the share, the sliding window's queries with the shard's node matcher, the
detectors, the page summaries).

    .venv/bin/python benchmarks/bench_shards.py --nodes 512 --ladder 8,4,2,1
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def recorded_fleet(nodes: int, job_nodes: int, seconds: float):
    from fleetscope.simulate.record import write_scenario
    from fleetscope.simulate.spec import FaultSpec, JobSpec, ScenarioSpec
    from tests.support.prom import Prometheus, backfill_openmetrics

    jobs = [
        JobSpec(f"job-{j}", nodes=job_nodes, first_node=j * job_nodes) for j in range(nodes // job_nodes - 1)
    ]
    spec = ScenarioSpec(
        name="realistic_bench_shards",
        nodes=nodes,
        duration_s=seconds,
        jobs=jobs,
        faults=[FaultSpec(kind="thermal_throttle", at_s=seconds / 3, node=3, gpu=1, slowdown=0.3)],
    )
    tmp = tempfile.TemporaryDirectory(prefix="bench-shards-")
    work = Path(tmp.name)
    t0 = time.perf_counter()
    recording, _ = write_scenario(spec, work / "recording.om")
    info = {
        "simulate_s": round(time.perf_counter() - t0, 1),
        "recording_mb": round(recording.stat().st_size / 1e6),
    }
    t0 = time.perf_counter()
    backfill_openmetrics(recording, work / "data")
    info["backfill_s"] = round(time.perf_counter() - t0, 1)
    recording.unlink()
    return tmp, Prometheus(work / "prom", data_dir=work / "data"), spec, info


def largest_shard(prom_url: str, spec, count: int, window: float) -> tuple[int, dict]:
    """The shard of ``count`` owning the most nodes at the first window's end."""
    from fleetscope.analyzers.core import LOADED
    from fleetscope.service.shard import Discovery, Shard, share_of
    from fleetscope.window.prometheus import PrometheusAccess
    from fleetscope.window.sources import PrometheusSource

    end = spec.start + window
    rows = Discovery().rows(
        PrometheusSource(PrometheusAccess(prom_url), LOADED), end - window, end, spec.step_s
    )
    shares = [share_of(rows, Shard(k, count)) for k in range(count)]
    k = max(range(count), key=lambda i: len(shares[i].nodes))
    return k, shares[k].summary()


def bench_shard(
    prom_url: str, spec, index: int, count: int, window: float, sliding: float, repeats: int
) -> dict:
    from fleetscope.analyzers.core import LOADED
    from fleetscope.service.live import LiveAnalysis
    from fleetscope.service.shard import Shard
    from fleetscope.window.prometheus import PrometheusAccess
    from fleetscope.window.sources import PrometheusSource

    source = PrometheusSource(PrometheusAccess(prom_url), LOADED, sliding=True)
    cycle = LiveAnalysis(source, None, spec.step_s, Shard(index, count))
    times = []
    for i in range(repeats + 1):
        e = spec.start + window + i * sliding
        t0 = time.perf_counter()
        result = cycle(e - window, e)
        times.append(time.perf_counter() - t0)
    return {
        "first_cycle_s": round(times[0], 2),
        "sliding_cycles_s": [round(t, 2) for t in times[1:]],
        "sliding_median_s": round(statistics.median(times[1:]), 2),
        "findings": len(result.report.findings),
        "share": result.shard,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=512)
    p.add_argument("--job-nodes", type=int, default=32)
    p.add_argument("--ladder", default="1,2,4,8")
    p.add_argument("--minutes", type=float, default=30)
    p.add_argument("--sliding", type=float, default=30)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    window = args.minutes * 60
    ladder = [int(x) for x in args.ladder.split(",")]
    tmp, prom, spec, info = recorded_fleet(
        args.nodes, args.job_nodes, window + (args.repeats + 1) * args.sliding
    )
    print(json.dumps({"fleet_nodes": args.nodes, "gpus": args.nodes * 8, **info}), flush=True)
    try:
        with prom:
            for n in ladder:
                k, _ = largest_shard(prom.url, spec, n, window)
                row = bench_shard(prom.url, spec, k, n, window, args.sliding, args.repeats)
                # Peak RSS of this process so far: run the ladder from the most shards down
                # (--ladder 8,4,2,1) and each row's peak is that shard size's.
                rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
                print(
                    json.dumps(
                        {
                            "shards": n,
                            "measured": k,
                            **row,
                            "peak_rss_mb": rss_mb,
                            "loadavg": [round(x, 1) for x in os.getloadavg()],
                        }
                    ),
                    flush=True,
                )
    finally:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
