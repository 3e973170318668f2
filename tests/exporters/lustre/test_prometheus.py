"""A real Prometheus scrapes the exporter on a copy of the p5 tree while the client stats move.

Checks that the series ingest under the contract's labels and that the shared PromQL builder
(``queries.lustre_metadata_latency``) turns them into the mean metadata latency per mount.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from fleetscope import contract, queries
from tests.exporters.lustre.helpers import FIXTURES
from tests.support.exporter import ExporterProcess
from tests.support.prom import Prometheus

pytestmark = [pytest.mark.server]

STATS = "sys/kernel/debug/lustre/llite/s4xbwbmv-ffff9e41c8d2b800/stats"


def bump_getattr(stats: Path, calls: int, usecs: int) -> None:
    """``calls`` more getattr taking ``usecs`` in all, written atomically like a fresh seq_file read."""
    lines = []
    for line in stats.read_text().splitlines(keepends=True):
        if line.startswith("getattr "):
            f = line.split()
            f[1], f[6] = str(int(f[1]) + calls), str(int(f[6]) + usecs)
            line = f"{f[0]:<25} {' '.join(f[1:])}\n"
        lines.append(line)
    tmp = stats.with_suffix(".new")
    tmp.write_text("".join(lines))
    os.replace(tmp, stats)


def test_prometheus_computes_metadata_latency_per_mount(tmp_path: Path) -> None:
    root = tmp_path / "p5"
    for sub in ("sys/fs", "sys/kernel", "proc"):
        shutil.copytree(FIXTURES / "p5" / sub, root / sub)
    flags = (
        "--collector.disable-defaults",
        "--collector.lustre",
        "--node.name=p5-node-3",
        f"--path.sysfs={root / 'sys'}",
        f"--path.procfs={root / 'proc'}",
        f"--path.debugfs={root / 'sys/kernel/debug'}",
    )
    with ExporterProcess(*flags, log_dir=tmp_path) as exporter:
        scrape = [{"job_name": "node", "static_configs": [{"targets": [exporter.url.split("//")[1]]}]}]
        with Prometheus(tmp_path / "prom", scrape_configs=scrape) as prom:
            selector = (
                f'{contract.LUSTRE_CLIENT_OPERATIONS}{{operation="getattr",mount="/fsx",fs="s4xbwbmv"}}'
            )
            prom.wait_until(f"count_over_time({selector}[1m]) >= 2")
            bump_getattr(root / STATS, calls=100, usecs=500_000)  # 100 getattr, 5 ms each
            # once a scrape after the change is in, both rates see the same step: the ratio is exact
            prom.wait_until(f"{selector} == 24100")
            rows = prom.query(queries.lustre_metadata_latency("1m"))
            assert len(rows) == 1
            assert rows[0]["metric"] == {"Hostname": "p5-node-3", "fs": "s4xbwbmv", "mount": "/fsx"}
            assert float(rows[0]["value"][1]) == pytest.approx(0.005, rel=1e-6)
            health = prom.query(contract.LUSTRE_CLIENT_HEALTHY.name)
            assert [r["value"][1] for r in health] == ["1"]
