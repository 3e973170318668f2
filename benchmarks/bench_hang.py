"""Hang root cause, offline and live: what naming the rank costs.

Three measurements, each the median of ``--repeats`` runs:

* ``fleetscope hang`` over a generated Flight Recorder dump set of ``--ranks`` ranks (pickles, one
  per rank, the shape of PyTorch's dumps; a tensor-parallel layout with one rank that never
  launched the data-parallel all-reduce the others wait in): load, reason, render JSON.
* the node exporter's ``nccl_ras`` collector against a RAS that answers a ``--ras-ranks``-rank
  JSON report (one world communicator, one per tensor-parallel and data-parallel group; some ranks
  behind, some missing): the whole collect (query, parse, reduce to bounded series).
* the same collect against a RAS that never answers ``STATUS`` (the scrape's worst case: it ends
  at the collector's deadline).

Run from the repository root (it reuses the tests' dump and report builders and fake RAS):

    .venv/bin/python benchmarks/bench_hang.py [--ranks 2048] [--ras-ranks 4096] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fleetscope.exporters.base import NodeContext  # noqa: E402
from fleetscope.exporters.nccl_ras import NcclRasCollector  # noqa: E402
from fleetscope.hang.analysis import analyze_paths  # noqa: E402
from fleetscope.hang.render import render_json  # noqa: E402
from tests.exporters.nccl_ras.test_collector import big_report  # noqa: E402
from tests.hang.builders import dump, write  # noqa: E402
from tests.support.fake_ras import FakeRas  # noqa: E402


def dump_set(directory: Path, ranks: int, tp: int = 8) -> int:
    """A ``ranks``-rank dump set: a world group, tensor-parallel groups and data-parallel groups;
    every rank completed 1,000 all-reduces in each; one rank never launched the next data-parallel
    one that its peers wait in. Returns the culprit."""
    groups = {"0": ("default_pg", list(range(ranks)))}
    for g in range(ranks // tp):
        groups[f"tp{g}"] = ("tp", list(range(g * tp, (g + 1) * tp)))
    for k in range(tp):
        groups[f"dp{k}"] = ("dp", list(range(k, ranks, tp)))
    culprit = ranks // 2 + 3
    dumps = {}
    for r in range(ranks):
        progress = {g: (1000, 1000) for g in groups}
        progress[f"dp{r % tp}"] = (1000, 1000) if r == culprit else (1001, 1000)
        dumps[r] = dump(r, groups, progress)
    write(directory, dumps)
    return culprit


def median_s(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def collect_once(address: str, timeout: float) -> int:
    options = argparse.Namespace(
        nccl_ras_address=[f"job={address}"],
        nccl_ras_timeout=timeout,
        nccl_ras_min_interval=0.001,
        training_directory="/nonexistent",
    )
    col = NcclRasCollector(NodeContext(node_name="bench", options=options))
    return sum(1 for _ in col.collect())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=2048)
    p.add_argument("--ras-ranks", type=int, default=4096)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        culprit = dump_set(Path(tmp), args.ranks)
        print(f"wrote {args.ranks} dumps in {time.perf_counter() - t0:.1f} s")
        took, result = median_s(lambda: render_json(analyze_paths([tmp], 60.0)), args.repeats)
        named = f'"rank": {culprit}' in str(result)
        print(f"fleetscope hang, {args.ranks} ranks: {took:.2f} s (culprit rank {culprit} named: {named})")
    report = big_report(args.ras_ranks, 8, list(range(0, 3000, 10)), missing=list(range(4000, 4020)))
    with FakeRas(report) as ras:
        took, n = median_s(lambda: collect_once(ras.address, 10.0), args.repeats)
    print(
        f"nccl_ras collect, {args.ras_ranks}-rank report ({len(report):,} bytes): {took:.2f} s, {n} families"
    )
    with FakeRas(report, mode="slow") as ras:
        took, _ = median_s(lambda: collect_once(ras.address, 4.0), 1)
    print(f"nccl_ras collect, a RAS that never answers: {took:.2f} s (the collector's deadline)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
