"""Benchmark of the sharded live service (docs/benchmarks.md, "Sharded service: the ladder").

A simulated fleet (``--nodes`` x 8 GPUs, jobs of ``--job-nodes`` nodes each, the rest job-less,
a GPU throttling in the first job) is recorded for ``--minutes`` + the sliding cycles, backfilled
into a real Prometheus, and for each shard count N of ``--ladder`` one shard is measured (the one
owning the most nodes; this 2-core machine runs one at a time): a first cycle over the 30-minute
window, then ``--repeats`` cycles each ``--sliding`` seconds later, each cycle the service's own
(the discovery query, the share, the sliding window's queries with the shard's node matcher, the
detectors, the page summaries).

    .venv/bin/python benchmarks/bench_shards.py --nodes 512 --ladder 8,4,2,1

``--synthetic`` measures without a backfill (docs/benchmarks.md, "Sharded service at 100k GPUs"):
a synthetic Prometheus (tests/support/synthetic_prom.py, in a process of its own: it shares the
machine's cores with the measured shard as a real store would not) serves a ``--fleet-nodes``
fleet made of copies of a ``--tile-nodes`` simulated tile (the same jobs, jobless nodes and
throttled GPU per tile); the shard count is picked so a shard holds about ``--shard-nodes`` nodes,
and the shard whose share is closest to that is measured, in a child process of its own (its
peak RSS is its own), on the same LiveAnalysis path. Per cycle the store's counts (queries and
samples answered, samples scanned) are read back from the synthetic server; the backend load of
all shards together is the discovery part times the shard count plus the range queries scaled to
the whole fleet, at the service's ``--interval``. The synthetic store pays its own way for what it
answers, and burns ``--scan-series-ns`` and ``--scan-ns`` CPU nanoseconds per series and sample
it would read but not answer (what the discovery's ``group by`` folds away; calibrated on a real
Prometheus). ``--one-process``
also measures the unsharded service over the whole fleet.

    .venv/bin/python benchmarks/bench_shards.py --synthetic --fleet-nodes 4096 --shard-nodes 500
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def recorded_fleet(nodes: int, job_nodes: int, seconds: float):
    from fleetscope.simulate.record import write_scenario
    from fleetscope.simulate.spec import DEFAULT_START
    from tests.support.prom import Prometheus, backfill_openmetrics
    from tests.support.synthetic_prom import bench_tile_spec

    spec = bench_tile_spec(nodes, job_nodes, DEFAULT_START, seconds, name="realistic_bench_shards")
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


def shares_at(url: str, spec, count: int, window: float, timeout: float = 30.0) -> list:
    """Every share of ``count`` shards at the first window's end, as the service computes them."""
    from fleetscope.analyzers.core import LOADED
    from fleetscope.service.shard import Discovery, Shard, share_of
    from fleetscope.window.prometheus import PrometheusAccess
    from fleetscope.window.sources import PrometheusSource

    end = spec.start + window
    source = PrometheusSource(PrometheusAccess(url, timeout=timeout), LOADED)
    rows = Discovery().rows(source, end - window, end, spec.step_s)
    return [share_of(rows, Shard(k, count)) for k in range(count)]


def largest_shard(prom_url: str, spec, count: int, window: float) -> tuple[int, dict]:
    """The shard of ``count`` owning the most nodes at the first window's end."""
    shares = shares_at(prom_url, spec, count, window)
    k = max(range(count), key=lambda i: len(shares[i].nodes))
    return k, shares[k].summary()


def cycles(
    url: str, spec, shard, window: float, sliding: float, repeats: int, timeout: float = 30.0, observe=None
):
    """The service's own cycles of one shard (``(K, N)``; None: the unsharded service): a first
    cycle over ``window``, then ``repeats`` each ``sliding`` seconds later. ``observe()`` is called
    before and after each cycle (what it answers after one is kept). Returns the summary, the
    observations."""
    from fleetscope.analyzers.core import LOADED
    from fleetscope.service.live import LiveAnalysis
    from fleetscope.service.shard import Shard
    from fleetscope.window.prometheus import PrometheusAccess
    from fleetscope.window.sources import PrometheusSource

    source = PrometheusSource(PrometheusAccess(url, timeout=timeout), LOADED, sliding=True)
    cycle = LiveAnalysis(source, None, spec.step_s, None if shard is None else Shard(*shard))
    discovery = _timed_discovery(cycle)
    times, cpu, seen = [], [], []
    for i in range(repeats + 1):
        e = spec.start + window + i * sliding
        if observe is not None:
            observe()
        t0, c0 = time.perf_counter(), time.process_time()
        result = cycle(e - window, e)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        if observe is not None:
            seen.append(observe())
    summary = {
        "first_cycle_s": round(times[0], 2),
        "sliding_cycles_s": [round(t, 2) for t in times[1:]],
        "sliding_median_s": round(statistics.median(times[1:]), 2),
        # The shard's own CPU (all its threads; not the store's), less moved by a loaded machine.
        "sliding_cpu_s": [round(t, 2) for t in cpu[1:]],
        # Discovery and placement, wall: the part of a cycle that can grow with the fleet.
        "sliding_discovery_s": [round(t, 3) for t in discovery[1:]],
        "findings": len(result.report.findings),
        "share": result.shard,
    }
    return summary, seen


def _timed_discovery(cycle) -> list[float]:
    """Times each cycle's discovery and placement (``cycle.discovery.rows`` and the share computed
    from its rows) into the returned list, one entry per cycle."""
    import fleetscope.service.live as live

    spent: list[float] = []
    if cycle.discovery is None:
        return spent
    rows, share_of = cycle.discovery.rows, live.share_of

    def timed_rows(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return rows(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - t0)

    def timed_share_of(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return share_of(*args, **kwargs)
        finally:
            spent[-1] += time.perf_counter() - t0

    cycle.discovery.rows = timed_rows
    live.share_of = timed_share_of  # this benchmark's child process only
    return spent


def bench_shard(
    prom_url: str, spec, index: int, count: int, window: float, sliding: float, repeats: int
) -> dict:
    return cycles(prom_url, spec, (index, count), window, sliding, repeats)[0]


# ---------------------------------------------------------------------- --synthetic
#: What a real Prometheus (2.42, this 2-core VM) spends per series and per sample it reads but
#: does not answer: the all-metrics discovery query over a backfilled 64-node fleet (16,256 series)
#: took 0.107 s over 3 minutes (276k samples) and 0.18 s over 31 (1.95M samples), so about 5.8 us a
#: series and 44 ns a sample (docs/benchmarks.md, "Sharded service at 100k GPUs"). The synthetic
#: store burns as much CPU, so the measured shard shares the cores with the store's work as it
#: would with a real one.
SCAN_NS = 44.0
SCAN_SERIES_NS = 5800.0


def start_synthetic(args, seconds: float) -> tuple[subprocess.Popen, str, dict]:
    """The synthetic Prometheus in its own process: (it, its URL, what it said on starting)."""
    cmd = [
        sys.executable,
        "-m",
        "tests.support.synthetic_prom",
        "--fleet-nodes",
        str(args.fleet_nodes),
        "--tile-nodes",
        str(args.tile_nodes),
        "--job-nodes",
        str(args.job_nodes),
        "--seconds",
        str(seconds),
        "--scan-ns",
        str(args.scan_ns),
        "--scan-series-ns",
        str(args.scan_series_ns),
        *(["--no-discovery-rule"] if args.no_discovery_rule else []),
    ]
    t0 = time.perf_counter()
    # Its stdin is a pipe from here: it ends when this process does, however it ends, and the
    # server exits with it.
    proc = subprocess.Popen(cmd, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline() if proc.stdout else ""
    if not line:
        proc.wait()
        raise SystemExit(f"the synthetic Prometheus did not start (exit {proc.returncode})")
    info = json.loads(line)
    info["start_s"] = round(time.perf_counter() - t0, 1)
    return proc, info.pop("url"), info


def store_stats(url: str, reset: bool = True) -> dict:
    with urllib.request.urlopen(f"{url}/synthetic/stats{'?reset=1' if reset else ''}", timeout=60) as r:
        return json.loads(r.read())


def _in_child(fn, *args):
    """``fn(*args)`` in a forked child: its result, and the child's own peak RSS (MB)."""
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        return pool.apply(_measured, (fn, *args))


def _measured(fn, *args):
    out = fn(*args)
    return out, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def closest_shard(url: str, spec, count: int, window: float, want: int) -> tuple[int, dict]:
    """The shard of ``count`` whose share is closest to ``want`` nodes (the larger on a tie)."""
    shares = shares_at(url, spec, count, window, timeout=600)
    k = min(range(count), key=lambda i: (abs(len(shares[i].nodes) - want), -len(shares[i].nodes)))
    return k, shares[k].summary()


def synthetic_cycles(url: str, spec, shard, window: float, sliding: float, repeats: int) -> dict:
    """The service's cycles of one shard (None: the unsharded service), with the store's counts."""
    summary, stats = cycles(
        url, spec, shard, window, sliding, repeats, timeout=600, observe=lambda: store_stats(url)
    )
    return {
        **summary,
        "first_cycle_store": _per_cycle([stats[0]]),
        "sliding_cycle_store": _per_cycle(stats[1:]),
        "store_cpu_s": [s["cpu_s"] for s in stats],
        "store_peak_rss_mb": stats[-1]["peak_rss_mb"],
    }


def _per_cycle(stats: list[dict]) -> dict:
    """The store's counts per cycle (the mean over ``stats``), split into discovery (the
    ``group`` queries) and the range queries of the shard's series."""
    n = len(stats)
    out: dict = {}
    for part, keep in (("discovery", lambda k: k == "group"), ("series", lambda k: k != "group")):
        out[part] = {
            f: round(sum(v for s in stats for k, v in s["by_kind"].items() if keep(k) for v in [v[f]]) / n)
            for f in ("queries", "samples_answered", "samples_scanned", "bytes_answered", "series_scanned")
        }
    return out


def backend_load(row: dict, shards: int, fleet_nodes: int, interval: float) -> dict:
    """All shards' load on the store per second at ``interval``: every shard asks the discovery
    its own way (the measured shard's count, times the shards); the range queries scale with the
    nodes asked for (the measured shard's per node, times the fleet)."""
    st = row["sliding_cycle_store"]
    nodes = max(1, (row["share"] or {}).get("nodes", fleet_nodes))
    scale = fleet_nodes / nodes
    out = {}
    for f in ("queries", "samples_answered", "samples_scanned"):
        disc = st["discovery"][f] * shards
        ser = st["series"][f] * (shards if f == "queries" else scale)
        out[f"{f}_per_s"] = round((disc + ser) / interval)
    return out


def synthetic_main(args) -> int:
    window = args.minutes * 60
    seconds = window + (args.repeats + 1) * args.sliding
    spec = _tile_spec(args, seconds)
    count = max(1, round(args.fleet_nodes / args.shard_nodes))
    proc, url, info = start_synthetic(args, seconds)
    head = {"fleet_nodes": args.fleet_nodes, "gpus": args.fleet_nodes * 8, "tile_nodes": args.tile_nodes}
    print(json.dumps({**head, "shards": count, "synthetic": info}), flush=True)
    try:
        rows = []
        if args.one_process:
            rows.append(("one process", None, 1))
        k, _ = _in_child(closest_shard, url, spec, count, window, args.shard_nodes)[0]
        rows.append((f"shard {k}/{count}", (k, count), count))
        last = None
        for label, shard, shards in rows:
            load0 = os.getloadavg()
            row, rss = _in_child(synthetic_cycles, url, spec, shard, window, args.sliding, args.repeats)
            row["backend_all_shards"] = backend_load(row, shards, args.fleet_nodes, args.interval)
            row.update(
                measured=label,
                peak_rss_mb=rss,
                loadavg=[round(x, 1) for x in (*load0, *os.getloadavg())],
            )
            print(json.dumps(row), flush=True)
            last = row
    finally:
        proc.terminate()
        proc.wait()
    assert last is not None
    print(f"median sliding cycle: {last['sliding_median_s']} s", flush=True)
    return 0


def _tile_spec(args, seconds: float):
    from tests.support.synthetic_prom import bench_tile_spec

    return bench_tile_spec(args.tile_nodes, args.job_nodes, _default_start(), seconds)


def _default_start() -> float:
    from fleetscope.simulate.spec import ScenarioSpec

    return ScenarioSpec().start


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=512)
    p.add_argument("--job-nodes", type=int, default=32)
    p.add_argument("--ladder", default="1,2,4,8")
    p.add_argument("--minutes", type=float, default=30)
    p.add_argument("--sliding", type=float, default=30)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--synthetic", action="store_true", help="a synthetic Prometheus, no backfill")
    p.add_argument("--fleet-nodes", type=int, default=512, help="--synthetic: the fleet's nodes")
    p.add_argument("--shard-nodes", type=int, default=500, help="--synthetic: about this many nodes a shard")
    p.add_argument("--tile-nodes", type=int, default=256, help="--synthetic: nodes simulated once, copied")
    p.add_argument("--interval", type=float, default=30.0, help="--synthetic: the service's --interval")
    p.add_argument("--one-process", action="store_true", help="--synthetic: also the unsharded service")
    p.add_argument(
        "--scan-ns",
        type=float,
        default=SCAN_NS,
        help="--synthetic: the store's CPU ns per sample read but not answered (0: free)",
    )
    p.add_argument(
        "--scan-series-ns",
        type=float,
        default=SCAN_SERIES_NS,
        help="--synthetic: the store's CPU ns per series read but not answered (0: free)",
    )
    p.add_argument(
        "--no-discovery-rule",
        action="store_true",
        help="--synthetic: a store without the discovery rule (the shards read the identity series)",
    )
    args = p.parse_args()
    if args.synthetic:
        return synthetic_main(args)
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
