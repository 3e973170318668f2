"""Helpers for the GPU collector tests: build collectors on replay fixtures and read their series."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetscope.exporters.base import NodeContext
from fleetscope.exporters.gpu import session as sessions
from tests.conftest import FIXTURES
from tests.support.collected import Series

NVML_FIXTURES = FIXTURES / "nvml"
CAPTURES = NVML_FIXTURES / "captures"


@pytest.fixture(autouse=True)
def _fresh_nvml_sessions() -> Iterator[None]:
    """Each test gets its own NVML session (they are process-wide in the exporter)."""
    sessions.forget_sessions()
    yield
    sessions.forget_sessions()


def options(**kw: object) -> argparse.Namespace:
    """The parsed flags of the gpu/xid collectors, with the exporter's defaults."""
    from fleetscope.exporters.gpu.collector import GpuCollector
    from fleetscope.exporters.gpu.xid import XidCollector

    p = argparse.ArgumentParser()
    GpuCollector.add_arguments(p)
    XidCollector.add_arguments(p)
    ns = p.parse_args([])
    for k, v in kw.items():
        setattr(ns, k, v)
    return ns


def context(procfs: Path | None = None, **kw: object) -> NodeContext:
    return NodeContext(node_name="node-a", procfs=procfs or Path("/proc"), options=options(**kw))


def values(series: Series, name: str, **match: str) -> list[float]:
    return [v for (n, labels), v in series.items() if n == name and match.items() <= dict(labels).items()]


def one(series: Series, name: str, **match: str) -> float:
    found = values(series, name, **match)
    assert len(found) == 1, f"{name}{match}: expected one series, got {found}"
    return found[0]


def fixture_with_script(
    tmp_path: Path, base: str, script: list[dict], copies_from: str | None = None
) -> Path:
    """A copy of a replay fixture with scripted changes (lost GPU, hang, XID events)."""
    data = json.loads((NVML_FIXTURES / base).read_text())
    data["script"] = script
    path = tmp_path / f"scripted-{base}"
    path.write_text(json.dumps(data))
    return path


def capture_q(name: str) -> str:
    """The 'load' nvidia-smi -q section of a real capture."""
    text = (CAPTURES / name).read_text()
    start = text.index("# load :: query (-q)")
    end = text.index("# load :: query-gpu", start)
    return text[start:end]


def capture_csv(name: str) -> dict[str, str]:
    """The 'load' --query-gpu CSV of a real capture, header -> value."""
    text = (CAPTURES / name).read_text()
    start = text.index("# load :: query-gpu (csv")
    lines = [line for line in text[start:].splitlines() if line and not line.startswith("#")]
    header = [h.strip().split(" [")[0] for h in lines[0].split(",")]
    row = [v.strip() for v in lines[1].split(",")]
    return dict(zip(header, row, strict=False))
