"""Render the dashboards to Grafana JSON: sorted keys, 2-space indent, stable panel ids."""

from __future__ import annotations

import json
from importlib import import_module

from grafanalib._gen import DashboardEncoder

from fleetscope.alerts.config import THRESHOLDS, Thresholds

#: file name -> module exposing ``build(cfg) -> Dashboard`` and ``UID``.
DASHBOARD_MODULES: dict[str, str] = {
    "cluster.json": "fleetscope.dashboards.cluster",
    "gpu-node.json": "fleetscope.dashboards.gpu_node",
    "efa.json": "fleetscope.dashboards.efa",
    "fsx.json": "fleetscope.dashboards.fsx",
    "training.json": "fleetscope.dashboards.training",
    "neuron-node.json": "fleetscope.dashboards.neuron",
    "inference-fleet.json": "fleetscope.dashboards.inference_fleet",
    "inference-replica.json": "fleetscope.dashboards.inference_replica",
}


def dashboard_json(module: str, cfg: Thresholds = THRESHOLDS) -> dict:
    """The dashboard as a plain JSON-able dict."""
    board = import_module(module).build(cfg)
    return json.loads(json.dumps(board.to_json_data(), cls=DashboardEncoder))


def dashboard_files(cfg: Thresholds = THRESHOLDS) -> dict[str, str]:
    return {
        name: json.dumps(dashboard_json(module, cfg), sort_keys=True, indent=2) + "\n"
        for name, module in DASHBOARD_MODULES.items()
    }
