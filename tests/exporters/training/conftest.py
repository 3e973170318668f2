from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetscope.exporters.base import NodeContext
from fleetscope.exporters.training import TrainingCollector
from tests.conftest import ROOT
from tests.support.collected import Series
from tests.support.collected import samples as collected


def make_collector(
    directory: Path, node: str = "node-a", procfs: Path = Path("/proc"), **options: object
) -> TrainingCollector:
    ns = argparse.Namespace(
        training_directory=str(directory),
        training_ttl=options.pop("ttl", 120.0),
        training_max_file_bytes=options.pop("max_file_bytes", 1 << 20),
        training_owner_uids=options.pop("owner_uids", ""),
    )
    assert not options, options
    return TrainingCollector(NodeContext(node_name=node, procfs=procfs, options=ns))


def samples(collector: TrainingCollector) -> Series:
    """Every sample one scrape of the collector yields, by (name, sorted labels)."""
    return collected(collector.collect())


def values(collector: TrainingCollector, name: str) -> dict[tuple[str, str], float]:
    """``{(job_id, rank): value}`` of one series name."""
    return {
        (dict(labels)["job_id"], dict(labels)["rank"]): v
        for (n, labels), v in samples(collector).items()
        if n == name
    }


class RankProcess:
    """tests/exporters/training/rank_writer.py as a real process (a training rank that can be killed)."""

    def __init__(self, directory: Path, job_id: str, rank: int, rate: float = 100.0) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.exporters.training.rank_writer",
                str(directory),
                job_id,
                str(rank),
                str(rate),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        line = self.proc.stdout.readline() if self.proc.stdout else b""
        if line.strip() != b"ready":
            self.proc.kill()
            raise AssertionError(f"rank writer did not start: {line!r} {self.proc.stderr.read()!r}")

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def rank_processes() -> Iterator[list[RankProcess]]:
    procs: list[RankProcess] = []
    yield procs
    for p in procs:
        if p.proc.poll() is None:
            p.kill()
