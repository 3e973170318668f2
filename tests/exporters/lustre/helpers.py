"""Run a collector on a fixture tree and look at what it yields."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from pathlib import Path

from prometheus_client.metrics_core import Metric as MetricFamily

from fleetscope.exporters.base import NodeContext
from tests.conftest import FIXTURES

LUSTRE = FIXTURES / "lustre"
NODE = "ip-172-31-7-12"


def context(root: Path, **options: object) -> NodeContext:
    """Roots laid out as the exporter's flags would give them for a node tree under ``root``."""
    return NodeContext(
        sysfs=root / "sys",
        procfs=root / "proc",
        debugfs=root / "sys" / "kernel" / "debug",
        node_name=NODE,
        options=argparse.Namespace(**options),
    )


def samples(families: Iterable[MetricFamily]) -> dict[tuple[str, frozenset], float]:
    """``(sample name, frozenset(labels.items())) -> value``; fails on a duplicate series."""
    out: dict[tuple[str, frozenset], float] = {}
    for family in families:
        for s in family.samples:
            key = (s.name, frozenset(s.labels.items()))
            assert key not in out, f"duplicate series {key}"
            out[key] = s.value
    return out


def series(found: dict[tuple[str, frozenset], float], name: str, **labels: str) -> dict[str, float]:
    """Values of ``name`` whose labels include ``labels``, keyed by their ``operation`` (or "")."""
    want = set(labels.items())
    return {
        dict(key).get("operation", ""): value
        for (n, key), value in found.items()
        if n == name and want <= set(key)
    }
