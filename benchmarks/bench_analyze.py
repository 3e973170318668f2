"""Benchmark ``fleetscope analyze --input``: time and peak RSS against cluster size and window length.

Each case simulates a job at a 15 s step with one GPU thermal-throttled from the middle, writes it
gzipped, then analyzes it in a fresh process (``python -m fleetscope analyze``), measuring the wall
time and the child's peak RSS (``ru_maxrss`` of a fresh child per case). Usage::

    .venv/bin/python benchmarks/bench_analyze.py              # 64 nodes x 2 h only
    .venv/bin/python benchmarks/bench_analyze.py --scaling    # 16/32/64 nodes x 2 h, 64 nodes x 1/4 h
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fleetscope.simulate.record import write_scenario  # noqa: E402
from fleetscope.simulate.spec import FaultSpec, ScenarioSpec  # noqa: E402

_MEASURE = """
import resource, subprocess, sys, time
t0 = time.monotonic()
rc = subprocess.run(sys.argv[1:]).returncode
wall = time.monotonic() - t0
print(rc, wall, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def case(nodes: int, hours: float, workdir: Path) -> dict:
    spec = ScenarioSpec(
        name=f"bench-{nodes}n-{hours:g}h",
        nodes=nodes,
        duration_s=hours * 3600,
        seed=7,
        faults=[FaultSpec(kind="thermal_throttle", at_s=hours * 1800, node=nodes // 2, gpu=4, slowdown=0.3)],
    )
    path = workdir / f"{spec.name}.om.gz"
    t0 = time.monotonic()
    write_scenario(spec, path)
    sim_s = time.monotonic() - t0
    cmd = [
        sys.executable,
        "-m",
        "fleetscope",
        "analyze",
        "--input",
        str(path),
        "--format",
        "json",
        "-o",
        os.devnull,
    ]
    res = subprocess.run([sys.executable, "-c", _MEASURE, *cmd], capture_output=True, text=True, cwd=ROOT)
    rc, wall, rss_kb = res.stdout.split()
    if rc != "0":
        raise SystemExit(res.stderr)
    size = path.stat().st_size
    path.unlink()
    return {
        "nodes": nodes,
        "gpus": nodes * 8,
        "hours": hours,
        "file_mb": size / 1e6,
        "simulate_s": sim_s,
        "analyze_s": float(wall),
        "peak_rss_mb": int(rss_kb) / 1024,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scaling", action="store_true", help="16/32/64 nodes x 2 h and 64 nodes x 1/4 h")
    ap.add_argument("--workdir", default=None, help="where the temporary recordings go")
    args = ap.parse_args()
    cases = [(64, 2.0)]
    if args.scaling:
        cases = [(16, 2.0), (32, 2.0), (64, 2.0), (64, 1.0), (64, 4.0)]
    print("| nodes | GPUs | hours | file (gzip) MB | simulate + write s | analyze s | peak RSS MB |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        for nodes, hours in cases:
            r = case(nodes, hours, Path(tmp))
            print(
                f"| {r['nodes']} | {r['gpus']} | {r['hours']:g} | {r['file_mb']:.0f} | {r['simulate_s']:.1f} "
                f"| {r['analyze_s']:.1f} | {r['peak_rss_mb']:.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
