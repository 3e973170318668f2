"""Run a collector on a fixture tree and look at what it yields."""

from __future__ import annotations

import argparse
from pathlib import Path

from fleetscope.exporters.base import NodeContext
from tests.conftest import FIXTURES
from tests.support.collected import Series

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


def series(found: Series, name: str, **labels: str) -> dict[str, float]:
    """Values of ``name`` whose labels include ``labels``, keyed by their ``operation`` (or "")."""
    want = set(labels.items())
    return {
        dict(key).get("operation", ""): value
        for (n, key), value in found.items()
        if n == name and want <= set(key)
    }
