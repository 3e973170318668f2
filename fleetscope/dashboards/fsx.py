"""FSx for Lustre storage, seen from the clients: throughput against capacity, metadata latency, health."""

from __future__ import annotations

import grafanalib.core as g

from fleetscope import contract as c
from fleetscope import queries
from fleetscope.alerts import names
from fleetscope.alerts.config import Thresholds
from fleetscope.alerts.testdata import num
from fleetscope.dashboards.common import HOST, dashboard, hostname_var, sel, state_timeline, timeseries

UID = "fleetscope-fsx"
W = "$__rate_interval"


def build(cfg: Thresholds) -> g.Dashboard:
    n = c.NODE_LABEL

    def s(metric: str) -> str:
        return sel(metric, **HOST)

    per_fs = queries.sum_of_counters((c.LUSTRE_CLIENT_READ_BYTES, c.LUSTRE_CLIENT_WRITE_BYTES), W, ("fs",))
    cap = cfg.fsx_throughput_capacity_bytes_per_second
    rows = [
        ("File system", [
            timeseries(
                "Throughput per file system (all clients)",
                [(per_fs, "{{fs}}")],
                "Bps",
                "Read + write of every client. The red line is the alert's limit: "
                f"{cfg.fsx_throughput_limit_ratio:.0%} of the configured capacity ({num(cap / 1e6)} MB/s, "
                "fleetscope/alerts/config.py).",
                min_value=0,
                thresholds=[
                    {"color": "green", "value": None},
                    {"color": "red", "value": cap * cfg.fsx_throughput_limit_ratio},
                ],
                thresholdsStyleMode="line",
            ),
            timeseries("Metadata operations per file system", [
                (f"sum by (fs, operation) (rate({c.LUSTRE_CLIENT_OPERATIONS}[{W}]))", "{{fs}} {{operation}}"),
            ], "ops", min_value=0),
        ]),
        ("Selected clients", [
            timeseries("Read", [(f"sum by ({n}, mount) (rate({s(c.LUSTRE_CLIENT_READ_BYTES)}[{W}]))",
                                 "{{Hostname}} {{mount}}")], "Bps", min_value=0),
            timeseries("Write", [(f"sum by ({n}, mount) (rate({s(c.LUSTRE_CLIENT_WRITE_BYTES)}[{W}]))",
                                  "{{Hostname}} {{mount}}")], "Bps", min_value=0),
            timeseries("Metadata latency", [(s(names.LUSTRE_METADATA_LATENCY), "{{Hostname}} {{mount}}")], "s",  # noqa: E501
                       "Mean time per metadata operation (open, getattr, ...).", min_value=0),
            state_timeline("Client health", s(c.LUSTRE_CLIENT_HEALTHY), "{{Hostname}}",
                           {1: ("healthy", "green"), 0: ("unhealthy", "red")}, "Lustre health_check per "
                                                                               "node."),
        ]),
    ]  # fmt: skip
    return dashboard(
        UID,
        "fleetscope / FSx for Lustre",
        "FSx for Lustre seen from its clients.",
        [hostname_var(c.LUSTRE_CLIENT_READ_BYTES, multi=True)],
        rows,
    )
