"""The neuron collector's tests: the recorded reports and the fake neuron-monitor that replays them."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import FIXTURES
from tests.support.exporter import ExporterProcess
from tests.support.prom import wait_for

NEURON = FIXTURES / "neuron"
FAKE_MONITOR = NEURON / "fake-neuron-monitor"
SHAPES = ("trn1", "trn2", "inf2")
#: The collector succeeded on this scrape.
OK = 'fleetscope_collector_success{collector="neuron"} 1.0'
FAIL = 'fleetscope_collector_success{collector="neuron"} 0.0'


def monitor_config(tmp_path: Path, shape: str = "trn2", period: float = 0.05, **fake: object) -> Path:
    """A neuron-monitor configuration for the fake, next to a copy of the shape's reports."""
    (tmp_path / f"{shape}.jsonl").write_text((NEURON / f"{shape}.jsonl").read_text())
    path = tmp_path / "monitor.conf"
    fake = {"reports": f"{shape}.jsonl", "starts_file": "starts", **fake}
    path.write_text(json.dumps({"period": f"{period}s", "fake": fake}))
    return path


def starts(tmp_path: Path) -> int:
    f = tmp_path / "starts"
    return len(f.read_text().splitlines()) if f.exists() else 0


def exporter(*flags: str, tmp_path: Path, node: str = "trn-0") -> ExporterProcess:
    """A real ``fleetscope exporter`` with only the neuron collector, running the fake monitor."""
    return ExporterProcess(
        "--collector.disable-defaults",
        "--collector.neuron",
        f"--collector.neuron.monitor-path={FAKE_MONITOR}",
        f"--node.name={node}",
        *flags,
        log_dir=tmp_path,
    )


def scrape_until(exp: ExporterProcess, wanted: str, timeout: float = 20) -> str:
    """The first scrape whose text contains ``wanted``."""

    def scrape() -> str | None:
        text = exp.metrics()
        return text if wanted in text else None

    return wait_for(scrape, timeout=timeout, what=f"a scrape with {wanted!r}")
