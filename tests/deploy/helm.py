"""Render the Helm chart offline with helm-python-sdk (Helm's Go SDK through ctypes: no helm binary,
no cluster, no network) and hand back the Kubernetes objects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

from tests.deploy.conftest import ROOT

CHART = ROOT / "charts" / "fleetscope"
EXAMPLES = sorted((CHART / "examples").glob("*.yaml"))


def load_values(path: Path | None) -> dict[str, Any] | None:
    return yaml.safe_load(path.read_text()) if path else None


def render(
    values: dict[str, Any] | None = None, chart: Path = CHART, namespace: str = "monitoring"
) -> list[dict]:
    """Every object the chart renders (NOTES.txt excluded), in template order."""
    loaded = helm.Chart.load(chart)
    loaded.validate_schema(values)
    manifests = loaded.render(values, name="fs", namespace=namespace, is_install=True)
    objects: list[dict] = []
    for path, text in sorted(manifests.items()):
        if path.endswith("NOTES.txt"):
            continue
        objects.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return objects


def by_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]
