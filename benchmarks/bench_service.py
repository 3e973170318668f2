"""Benchmark of the live service (docs/benchmarks.md, "Live service: analysis cycle and API latency").

(a) ``cycle``: one analysis cycle over a 64-node job's last 30 minutes. The simulator records 30
    minutes of a 64-node x 8-GPU job with one failing GPU; promtool backfills it into a real
    Prometheus; ``analyze_source`` of a Prometheus source (what every service cycle calls) is timed
    over that window.
(b) ``api``: API latency under 50 concurrent clients on loopback. ``fleetscope``'s app runs under
    uvicorn in its own process, holding the verdicts of a 64-node cluster (512 GPUs, 512 ranks);
    50 client threads, each on its own keep-alive connection, send a bounded number of GETs over
    the page's endpoints; latency percentiles are reported.

    .venv/bin/python benchmarks/bench_service.py            # all: cycle, then the API idle and
                                                            # while the analysis runs back to back
    .venv/bin/python benchmarks/bench_service.py api --clients 50 --requests 6000   # idle only
    .venv/bin/python benchmarks/bench_service.py cycle --nodes 64 --minutes 30
    .venv/bin/python benchmarks/bench_service.py cycle --nodes 512 --sliding 30   # the service's
        # own path: a first cycle loads the 30-minute window, then each cycle slides it 30 s and
        # fetches only what is new (the recording runs 30 min + repeats x 30 s)
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ENDPOINTS = [
    "/api/v1/nodes",
    "/api/v1/findings",
    "/api/v1/jobs/4711",
    "/api/v1/findings?kind=failing_node",
    "/metrics",
    "/readyz",
]


# --- (b) API latency ------------------------------------------------------------------------


def cluster_analysis(n_nodes: int = 64, gpus: int = 8):
    """The verdicts of a 64-node cluster: one failing node, two degraded, 512 ranks, one straggler."""
    from fleetscope.analyzers.findings import Finding
    from fleetscope.analyzers.report import JobSummary, NodeVerdict, Report, StragglerScore

    end = time.time()
    a = Report(start=end - 1800, end=end)
    for i in range(1, n_nodes + 1):
        name = f"ip-10-1-{i // 256}-{i % 256}"
        state = "failing" if i == 7 else "degraded" if i in (20, 41) else "healthy"
        a.nodes[name] = NodeVerdict(
            name,
            state,
            [] if state == "healthy" else [f"{state} for a reason"],
            {str(g): state if g == 3 else "healthy" for g in range(gpus)},
        )
        if state != "healthy":
            a.findings.append(
                Finding(
                    "failing_node" if state == "failing" else "straggler",
                    "critical" if state == "failing" else "warning",
                    name,
                    end - 900,
                    "gpu_lost",
                    "drain now",
                    gpu="3",
                    evidence={"fleetscope_gpu_up": "1 -> 0"},
                )
            )
    nodes = sorted(a.nodes)
    for r in range(n_nodes * gpus):
        a.straggler_scores.append(
            StragglerScore("4711", r, nodes[r // gpus], str(r % gpus), 1.0 + (r % 17) / 1000)
        )
    a.jobs["4711"] = JobSummary("4711", n_nodes * gpus, nodes, 0.41, 2.1e6, 1.9, [163])
    return a


def fixed_window(url: str, start0: float, end0: float, start: float, end: float):
    """The real analysis of the recorded window, whatever the clock says (module-level: picklable)."""
    from fleetscope.service.live import LiveResult
    from tests.support.analysis import analyze_prometheus

    return LiveResult(analyze_prometheus(url, start0, end0, step=15.0))


def serve_fixture(port: int, mode: str = "idle", url: str = "", start: float = 0.0, end: float = 0.0) -> None:
    """The server process of (b): the real app under uvicorn, as ``fleetscope serve`` runs it.

    ``idle``: scripted verdicts of a 64-node cluster, no analysis running. ``thread``/``process``: the
    real analysis of the backfilled recording runs back to back (interval ~0) in a thread of the
    server process / in the child process ``fleetscope serve`` uses, while the clients measure.
    """
    import functools

    import uvicorn

    from fleetscope.service.app import ServiceSettings, create_app
    from fleetscope.service.isolate import ProcessAnalyze
    from fleetscope.service.live import LiveResult

    if mode == "idle":
        result = LiveResult(cluster_analysis())
        app = create_app(ServiceSettings(interval=30, window=1800), lambda start, end: result)
    else:
        analyze = functools.partial(fixed_window, url, start, end)
        settings = ServiceSettings(interval=0.01, window=1800, stale_after=3600)
        app = create_app(settings, ProcessAnalyze(analyze) if mode == "process" else analyze)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, server_header=False)


def _client(
    port: int, paths: list[str], out: list[tuple[str, float]], errors: list[str], go: threading.Event
):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    go.wait()
    for path in paths:
        t0 = time.perf_counter()
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            resp.read()
            if resp.status != 200:
                errors.append(f"{path}: {resp.status}")
        except (OSError, http.client.HTTPException) as exc:
            errors.append(f"{path}: {exc}")
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            continue
        out.append((path, time.perf_counter() - t0))
    conn.close()


async def _async_client(
    port: int, paths: list[str], out: list[tuple[str, float]], errors: list[str], go
) -> None:
    import asyncio

    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    await go.wait()
    for path in paths:
        t0 = time.perf_counter()
        writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        await reader.readexactly(length)
        out.append((path, time.perf_counter() - t0))
        if status != 200:
            errors.append(f"{path}: {status}")
    writer.close()


def run_async_clients(port: int, plans: list[list[str]], results, errors) -> float:
    import asyncio

    async def main() -> float:
        go = asyncio.Event()
        tasks = [
            asyncio.create_task(_async_client(port, p, results[i], errors, go)) for i, p in enumerate(plans)
        ]
        await asyncio.sleep(0.5)
        t0 = time.perf_counter()
        go.set()
        await asyncio.gather(*tasks)
        return time.perf_counter() - t0

    return asyncio.run(main())


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q / 100 * len(s)) - 1))]


def bench_api(
    clients: int,
    requests: int,
    client_kind: str = "asyncio",
    mode: str = "idle",
    window: tuple[str, float, float] = ("", 0.0, 0.0),
) -> dict:
    from tests.support.prom import free_port, http_get, wait_for

    port = free_port()
    argv = [sys.executable, __file__, "_serve", str(port), mode, window[0], repr(window[1]), repr(window[2])]
    server = subprocess.Popen(argv, cwd=ROOT)
    try:
        wait_for(lambda: http_get(f"http://127.0.0.1:{port}/readyz", timeout=1)[0] == 200, 120, what="server")
        # Warm up every endpoint once.
        for path in ENDPOINTS:
            assert http_get(f"http://127.0.0.1:{port}{path}")[0] == 200, path
        per_client = requests // clients
        results: list[list[tuple[str, float]]] = [[] for _ in range(clients)]
        errors: list[str] = []
        plans = [[ENDPOINTS[(c + i) % len(ENDPOINTS)] for i in range(per_client)] for c in range(clients)]
        if client_kind == "asyncio":
            wall = run_async_clients(port, plans, results, errors)
        else:
            go = threading.Event()
            threads = []
            for c in range(clients):
                t = threading.Thread(target=_client, args=(port, plans[c], results[c], errors, go))
                t.start()
                threads.append(t)
            time.sleep(0.5)  # every client connected and waiting
            t0 = time.perf_counter()
            go.set()
            for t in threads:
                t.join()
            wall = time.perf_counter() - t0
    finally:
        server.terminate()
        server.wait(10)
    lat = [d for r in results for _, d in r]
    by_path: dict[str, list[float]] = {}
    for r in results:
        for path, d in r:
            by_path.setdefault(path, []).append(d)
    ms = 1000.0
    return {
        "analysis": mode,
        "client": client_kind,
        "clients": clients,
        "requests": len(lat),
        "errors": len(errors),
        "wall_s": round(wall, 2),
        "throughput_rps": round(len(lat) / wall, 1),
        "p50_ms": round(statistics.median(lat) * ms, 2),
        "p95_ms": round(pct(lat, 95) * ms, 2),
        "p99_ms": round(pct(lat, 99) * ms, 2),
        "max_ms": round(max(lat) * ms, 2),
        "p99_ms_by_endpoint": {p: round(pct(v, 99) * ms, 2) for p, v in by_path.items()},
    }


# --- (a) analysis cycle ----------------------------------------------------------------------


@contextlib.contextmanager
def recorded_prometheus(nodes: int, minutes: float):
    """Simulate ``nodes`` x 8 GPUs for ``minutes`` (a GPU lost a third in), backfill, serve it."""
    from fleetscope.simulate.record import write_scenario
    from fleetscope.simulate.spec import FaultSpec, ScenarioSpec
    from tests.support.prom import Prometheus, backfill_openmetrics

    spec = ScenarioSpec(
        name="bench-service",
        nodes=nodes,
        duration_s=minutes * 60.0,
        faults=[FaultSpec(kind="gpu_lost", at_s=minutes * 60.0 / 3, node=7, gpu=3)],
    )
    with tempfile.TemporaryDirectory(prefix="bench-service-") as tmp:
        work = Path(tmp)
        t0 = time.perf_counter()
        recording, _ = write_scenario(spec, work / "recording.om")
        info = {
            "simulate_s": round(time.perf_counter() - t0, 1),
            "recording_mb": round(recording.stat().st_size / 1e6, 1),
        }
        t0 = time.perf_counter()
        backfill_openmetrics(recording, work / "data")
        info["backfill_s"] = round(time.perf_counter() - t0, 1)
        recording.unlink()
        with Prometheus(work / "prom", data_dir=work / "data") as prom:
            yield prom, spec, info


def bench_cycle(prom, spec, info: dict, repeats: int, sliding: float = 0.0, window: float = 0.0) -> dict:
    """``repeats`` cycles over the recording's window; with ``sliding`` (seconds), the service's
    path: a first cycle over ``window`` seconds, then each cycle ``sliding`` seconds later."""
    from fleetscope.analyzers.core import LOADED
    from fleetscope.service.live import LiveAnalysis
    from fleetscope.window.prometheus import PrometheusAccess
    from fleetscope.window.sources import PrometheusSource
    from tests.support.analysis import analyze_prometheus

    source = PrometheusSource(PrometheusAccess(prom.url), LOADED, sliding=True)
    service = LiveAnalysis(source, None, spec.step_s)
    start, end = spec.start, spec.start + spec.duration_s
    times = []
    first = None
    for i in range(repeats + (1 if sliding else 0)):
        t0 = time.perf_counter()
        try:
            if sliding:
                e = start + window + i * sliding
                analysis = service(e - window, e).report
            else:
                analysis = analyze_prometheus(prom.url, start, end, step=spec.step_s)
        except Exception:
            print(prom.log_file.read_text()[-3000:], file=sys.stderr)
            raise
        if sliding and i == 0:
            first = time.perf_counter() - t0
        else:
            times.append(time.perf_counter() - t0)
    return {
        "nodes": spec.nodes,
        "gpus": spec.nodes * spec.gpus_per_node,
        "window_minutes": (window or spec.duration_s) / 60,
        "step_s": spec.step_s,
        **info,
        **({"sliding_s": sliding, "first_cycle_s": round(first or 0.0, 2)} if sliding else {}),
        "cycle_s": [round(t, 2) for t in times],
        "cycle_median_s": round(statistics.median(times), 2),
        "findings": len(analysis.findings),
        "failing_nodes": sorted(n for n, v in analysis.nodes.items() if v.state == "failing"),
    }


def main() -> int:
    if len(sys.argv) >= 3 and sys.argv[1] == "_serve":
        port, mode, url, start, end = sys.argv[2], *sys.argv[3:7]
        serve_fixture(int(port), mode, url, float(start), float(end))
        return 0
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("part", nargs="?", choices=["api", "cycle", "all"], default="all")
    p.add_argument("--clients", type=int, default=50)
    p.add_argument("--requests", type=int, default=6000)
    p.add_argument("--nodes", type=int, default=64)
    p.add_argument("--minutes", type=int, default=30)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--sliding",
        type=float,
        default=0.0,
        metavar="S",
        help="cycle as the service does: slide the window S seconds a cycle, fetching only what is new",
    )
    p.add_argument(
        "--client",
        choices=["asyncio", "threads"],
        default="asyncio",
        help="50 keep-alive connections on one asyncio loop (default) or one thread each",
    )
    args = p.parse_args()
    out: dict = {"python": sys.version.split()[0], "cpus": os.cpu_count()}
    if args.part == "api":
        out["api"] = [bench_api(args.clients, args.requests, args.client)]
    else:
        extra = args.repeats * args.sliding / 60
        with recorded_prometheus(args.nodes, args.minutes + extra) as (prom, spec, info):
            out["cycle"] = bench_cycle(prom, spec, info, args.repeats, args.sliding, args.minutes * 60.0)
            if args.part == "all":
                window = (prom.url, spec.start, spec.start + spec.duration_s)
                out["api"] = [
                    bench_api(args.clients, args.requests, args.client, mode, window)
                    for mode in ("idle", "process", "thread")
                ]
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
