"""Loading at scale: a recording, its Parquet archive and (optionally) Prometheus, against cluster size.

For each case (nodes x hours, 15 s samples, one GPU thermal-throttled from the middle) the simulator
writes a gzipped recording into ``--workdir`` (default: the system's temporary folder; a 512-node hour
is about 330 MB gzipped, 10 GB unzipped, so never the repository), then each measurement runs in a
fresh process, timed from outside (wall time, peak RSS of that process):

* ``floor``: merely decompressing the recording and splitting it into lines in Python (16 MB
  blocks, stdlib ``gzip``, ``bytes.split``; the process imports nothing else): the floor the
  recording path is measured against (issue 32: the default command within 1.5 times it), printed
  with the ratio ``default-om / floor``;
* ``floor-libs``: the same in a process that first imports what the analyzers import (numpy,
  pandas, pyarrow, the analyzers: about 0.4 s), as ``floor`` did until 2026-12-06 (the earlier
  figures in docs/benchmarks.md are against it), printed with ``default-om / floor-libs``;
* ``pandas``: a plain pandas reading of the same series (``read_csv`` of the lines, ``str.rsplit`` into
  head, value and timestamp, ``groupby`` the head): the baseline the recording loader is held to;
* ``read``: ``load_file.read_openmetrics`` (what ``analyze --input X.om.gz`` parses);
* ``record``: ``fleetscope record --input X.om.gz -o X.parquet``;
* ``load-om`` / ``load-parquet``: ``load_file`` to frames (the whole load: parse, clean, grid);
* ``analyze-om`` / ``analyze-parquet``: ``fleetscope analyze --input ... --format json --chunk off``
  (the window in one piece);
* ``stream-om`` / ``stream-parquet``: the same with ``--chunk 1h`` (streamed: one hour and its
  15-minute lead-in in memory at a time; the recording converted to an archive first);
* ``default-om``: ``fleetscope analyze --input X.om.gz`` as it runs by default (``--chunk auto``:
  one piece up to 2 hours, streamed through an archive past them);

``floor``, ``floor-libs`` and ``default-om`` run last, in ``--rounds`` interleaved rounds (default 3)
after one unrecorded pass over the file: a reading right after the simulator wrote the file was
0.3 s slower than the ones after it, which flattered the ratio. Each prints its median and range,
and the ratios are of the medians (with the range of the rounds' own ratios).
* with ``--prometheus``: the recording backfilled into a real Prometheus (promtool), then
  ``fleetscope analyze --prometheus`` over the window, and ``fleetscope record --prometheus``;
* with ``--tile N``: ``stream-tiled``, the archive repeated N times back to back
  (``tile_archive.py``: 512 nodes x 2 h tiled 12 times is a day, without simulating a day), then
  ``fleetscope analyze --input tiled.parquet --chunk 1h``.

Usage::

    .venv/bin/python benchmarks/bench_load.py --case 64x1                  # one case, every measurement
    .venv/bin/python benchmarks/bench_load.py --case 64x1 --case 128x1 --skip pandas
    .venv/bin/python benchmarks/bench_load.py --case 64x1 --prometheus
    .venv/bin/python benchmarks/bench_load.py --case 512x2 --tile 12 --skip pandas --skip read ...
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

_MEASURE = """
import resource, subprocess, sys, time
t0 = time.monotonic()
res = subprocess.run(sys.argv[1:], capture_output=True, text=True)
wall = time.monotonic() - t0
sys.stderr.write(res.stderr[-2000:])
sys.stdout.write(res.stdout[-2000:])
print("MEASURED", res.returncode, wall, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""
MEASUREMENTS = (
    "floor",
    "floor-libs",
    "pandas",
    "read",
    "record",
    "load-om",
    "load-parquet",
    "analyze-om",
    "analyze-parquet",
    "stream-om",
    "stream-parquet",
    "default-om",
)


def pandas_baseline(path: str) -> tuple[int, int]:
    """The series the analyzers read, by plain pandas: (series, samples)."""
    import pandas as pd

    from fleetscope.analyzers.core import LOADED

    lines = pd.read_csv(
        path,
        header=None,
        names=["line"],
        sep="\x1f",
        quoting=csv.QUOTE_NONE,
        comment="#",
        engine="c",
        dtype=str,
    )["line"]
    parts = lines.str.rsplit(" ", n=2, expand=True)
    name = parts[0].str.extract(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)", expand=False)
    parts = parts[name.isin(set(LOADED))]
    values = pd.to_numeric(parts[1]).to_numpy()
    times = pd.to_numeric(parts[2]).to_numpy()
    series = {}
    for head, idx in parts.groupby(0, sort=False).indices.items():
        labels = dict(pd.Series([head]).str.extractall(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"').values.tolist())
        series[head] = (labels, times[idx], values[idx])
    return len(series), len(values)


def floor_lines(path: str) -> int:
    """Decompress the recording and split it into lines in Python: (lines). The floor of any reader."""
    import gzip

    lines, tail = 0, b""
    with gzip.open(path, "rb") as f:
        while block := f.read(16 << 20):
            parts = (tail + block).split(b"\n")
            tail = parts.pop()
            lines += len(parts)
    return lines + bool(tail)


def one(mode: str, path: str) -> None:
    """Run one in-process measurement (in the child process); ``floor`` imports nothing more."""
    if mode == "floor":
        t0 = time.monotonic()
        lines = floor_lines(path)
        print(f"INNER {time.monotonic() - t0:.2f} s, {lines} lines")
        return
    from fleetscope.analyzers.core import LOADED
    from fleetscope.window.openmetrics import read_openmetrics
    from tests.support.analysis import load_file

    t0 = time.monotonic()
    if mode == "floor-libs":
        n_series, n_samples = floor_lines(path), 0
    elif mode == "pandas":
        n_series, n_samples = pandas_baseline(path)
    elif mode == "read":
        raw = read_openmetrics(path, LOADED)[0]
        n_series, n_samples = sum(map(len, raw.values())), sum(s.times.size for v in raw.values() for s in v)
    else:  # load-om, load-parquet
        frames = load_file(path, LOADED)
        n_series, n_samples = sum(len(m) for m in frames.metrics.values()), len(frames.times)
    samples = f"{n_series} series, {n_samples} samples/grid times"
    what = f"{n_series} lines" if mode == "floor-libs" else samples
    print(f"INNER {time.monotonic() - t0:.2f} s, {what}")


def measure(cmd: list[str]) -> tuple[float, float, str]:
    res = subprocess.run([sys.executable, "-c", _MEASURE, *cmd], capture_output=True, text=True, cwd=ROOT)
    last = [ln for ln in res.stdout.splitlines() if ln.startswith("MEASURED")]
    if not last:
        raise SystemExit(res.stderr[-3000:])
    _, rc, wall, rss_kb = last[-1].split()
    if rc != "0":
        raise SystemExit(f"{cmd} failed:\n{res.stderr[-3000:]}")
    inner = next((ln for ln in res.stdout.splitlines() if ln.startswith("INNER")), "")
    return float(wall), int(rss_kb) / 1024, inner.removeprefix("INNER ")


#: The measurements of the floor ratio, run in interleaved rounds.
RATIO_MODES = ("floor", "floor-libs", "default-om")


def run_rounds(cmds: dict[str, list[str]], modes: list[str], rounds: int) -> None:
    """The modes' walls in ``rounds`` interleaved rounds, after one unrecorded pass of the first:
    a row per mode (median, range, peak RSS), the ratios of the medians."""
    if not modes:
        return
    measure(cmds[modes[0]])  # the file read once (its pages, the interpreter's) before any counts
    walls: dict[str, list[float]] = {m: [] for m in modes}
    rss: dict[str, float] = dict.fromkeys(modes, 0.0)
    for _ in range(rounds):
        for mode in modes:
            wall, peak, _ = measure(cmds[mode])
            walls[mode].append(wall)
            rss[mode] = max(rss[mode], peak)
    medians = {m: statistics.median(w) for m, w in walls.items()}
    for mode in modes:
        w = walls[mode]
        spread = f"{rounds} rounds: {min(w):.2f} to {max(w):.2f} s"
        print(f"| {mode} | {medians[mode]:.2f} | {rss[mode]:.0f} | {spread} |", flush=True)
    for floor in ("floor", "floor-libs"):
        if floor in walls and "default-om" in walls:
            own = [d / f for d, f in zip(walls["default-om"], walls[floor], strict=True)]
            print(
                f"default-om / {floor}: {medians['default-om'] / medians[floor]:.2f} (medians; the rounds "
                f"{min(own):.2f} to {max(own):.2f}; load average {os.getloadavg()[0]:.1f})"
            )


def run_case(
    nodes: int, hours: float, workdir: Path, skip: set[str], prometheus: bool, tile: int, rounds: int
) -> None:
    from fleetscope.simulate.record import write_scenario
    from fleetscope.simulate.spec import FaultSpec, ScenarioSpec

    spec = ScenarioSpec(
        name=f"load-{nodes}n-{hours:g}h",
        nodes=nodes,
        duration_s=hours * 3600,
        seed=7,
        faults=[FaultSpec(kind="thermal_throttle", at_s=hours * 1800, node=nodes // 2, gpu=4, slowdown=0.3)],
    )
    om = workdir / f"{spec.name}.om.gz"
    pq = workdir / f"{spec.name}.parquet"
    t0 = time.monotonic()
    _, truth = write_scenario(spec, om)
    print(
        f"\n## {nodes} nodes x {hours:g} h: recording {om.stat().st_size / 1e6:.0f} MB gzip, "
        f"simulated in {time.monotonic() - t0:.1f} s",
        flush=True,
    )
    me = [sys.executable, str(Path(__file__).resolve()), "--one"]
    fs = [sys.executable, "-m", "fleetscope"]

    def analyze(path: Path, chunk: str) -> list[str]:
        return [*fs, "analyze", "--input", str(path), "--format", "json", "-o", os.devnull, "--chunk", chunk]

    cmds = {
        "floor": [*me, "floor", str(om)],
        "floor-libs": [*me, "floor-libs", str(om)],
        "pandas": [*me, "pandas", str(om)],
        "read": [*me, "read", str(om)],
        "record": [*fs, "record", "--input", str(om), "-o", str(pq), "--no-progress"],
        "load-om": [*me, "load-om", str(om)],
        "load-parquet": [*me, "load-parquet", str(pq)],
        "analyze-om": analyze(om, "off"),
        "analyze-parquet": analyze(pq, "off"),
        "stream-om": analyze(om, "1h"),
        "stream-parquet": analyze(pq, "1h"),
        "default-om": analyze(om, "auto"),
    }
    print("| measurement | wall s | peak RSS MB | inside |\n| --- | ---: | ---: | --- |")
    for mode in MEASUREMENTS:
        if mode in skip or mode in RATIO_MODES:
            continue
        if mode.endswith("parquet") and not pq.exists() and "record" in skip:
            continue
        wall, rss, inner = measure(cmds[mode])
        print(f"| {mode} | {wall:.1f} | {rss:.0f} | {inner} |", flush=True)
    run_rounds(cmds, [m for m in RATIO_MODES if m not in skip], rounds)
    if pq.exists():
        print(f"archive: {pq.stat().st_size / 1e6:.1f} MB")
    if tile and pq.exists():
        from benchmarks.tile_archive import tile as tile_archive

        tiled = workdir / f"{spec.name}-x{tile}.parquet"
        t0 = time.monotonic()
        info = tile_archive(pq, tiled, tile)
        print(
            f"tiled x{tile} ({info['rows'] / 1e6:.0f} M rows, {tiled.stat().st_size / 1e6:.0f} MB) "
            f"in {time.monotonic() - t0:.0f} s",
            flush=True,
        )
        wall, rss, _ = measure(analyze(tiled, "1h"))
        print(f"| stream-tiled x{tile} | {wall:.1f} | {rss:.0f} | |", flush=True)
        tiled.unlink()
    if prometheus:
        run_prometheus(om, truth, workdir)
    om.unlink()
    truth.unlink(missing_ok=True)
    pq.unlink(missing_ok=True)


def run_prometheus(om: Path, truth: Path, workdir: Path) -> None:
    import gzip
    import json

    from tests.support.prom import Prometheus, backfill_openmetrics

    plain = workdir / "backfill.om"
    with gzip.open(om) as src, plain.open("wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    t0 = time.monotonic()
    backfill_openmetrics(plain, workdir / "tsdb")
    plain.unlink()
    print(f"backfilled into Prometheus' TSDB in {time.monotonic() - t0:.1f} s")
    window = json.loads(truth.read_text())["window"]
    window = ["--start", window["start"], "--end", window["end"], "--step", "15"]
    try:
        with Prometheus(workdir / "prom", data_dir=workdir / "tsdb") as prom:
            fs = [sys.executable, "-m", "fleetscope"]
            for what, cmd in (
                (
                    "analyze-prometheus",
                    [
                        *fs,
                        "analyze",
                        "--prometheus",
                        prom.url,
                        *window,
                        "--format",
                        "json",
                        "-o",
                        os.devnull,
                        "--timeout",
                        "600",
                    ],
                ),
                (
                    "record-prometheus",
                    [
                        *fs,
                        "record",
                        "--prometheus",
                        prom.url,
                        *window,
                        "-o",
                        str(workdir / "p.parquet"),
                        "--timeout",
                        "600",
                        "--no-progress",
                    ],
                ),
            ):
                wall, rss, _ = measure(cmd)
                print(f"| {what} | {wall:.1f} | {rss:.0f} | |", flush=True)
    finally:
        shutil.rmtree(workdir / "tsdb", ignore_errors=True)
        shutil.rmtree(workdir / "prom", ignore_errors=True)
        (workdir / "p.parquet").unlink(missing_ok=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--case", action="append", default=[], metavar="NODESxHOURS", help="e.g. 64x1 (repeatable)"
    )
    ap.add_argument(
        "--skip", action="append", default=[], choices=MEASUREMENTS, help="leave a measurement out"
    )
    ap.add_argument(
        "--prometheus", action="store_true", help="also backfill into a real Prometheus and query it"
    )
    ap.add_argument(
        "--tile",
        type=int,
        default=0,
        metavar="N",
        help="also stream the archive repeated N times back to back (stream-tiled)",
    )
    ap.add_argument(
        "--rounds", type=int, default=3, help="interleaved rounds of floor, floor-libs and default-om"
    )
    ap.add_argument("--workdir", default=None, help="where the temporary recordings go (not the repository)")
    ap.add_argument("--one", nargs=2, metavar=("MODE", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        one(*args.one)
        return
    print(
        f"machine: {os.cpu_count()} CPUs {platform.machine()}, Python {platform.python_version()}, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    with tempfile.TemporaryDirectory(dir=args.workdir, prefix="fleetscope-bench-") as tmp:
        for case in args.case or ["64x1"]:
            nodes, hours = case.split("x")
            run_case(
                int(nodes), float(hours), Path(tmp), set(args.skip), args.prometheus, args.tile, args.rounds
            )
        print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
