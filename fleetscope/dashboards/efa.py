"""EFA network: traffic and the SRD trouble counters per device, for one node or all."""

from __future__ import annotations

import grafanalib.core as g

from fleetscope import contract as c
from fleetscope import queries
from fleetscope.alerts import names
from fleetscope.alerts.config import Thresholds
from fleetscope.dashboards.common import HOST, dashboard, hostname_var, sel, timeseries

UID = "fleetscope-efa"
W = "$__rate_interval"


def build(cfg: Thresholds) -> g.Dashboard:
    n = c.NODE_LABEL

    def s(metric: str) -> str:
        return sel(metric, **HOST)

    def per_device(metric: str, fn: str = "rate") -> str:
        return f"sum by ({n}, device) ({fn}({s(metric)}[{W}]))"

    dev = "{{Hostname}} {{device}}"
    wr_err = (c.EFA_RDMA_READ_WR_ERR, c.EFA_RDMA_WRITE_WR_ERR)
    cmds_err = c.METRICS[c.efa_metric_name("cmds_err")]
    rows = [
        ("Traffic", [
            timeseries("Transmitted", [(per_device(c.EFA_TX_BYTES), dev)], "Bps", min_value=0),
            timeseries("Received", [(per_device(c.EFA_RX_BYTES), dev)], "Bps", min_value=0),
            timeseries("RDMA read / write", [
                (per_device(c.EFA_RDMA_READ_BYTES), f"{dev} read"),
                (per_device(c.EFA_RDMA_WRITE_BYTES), f"{dev} write"),
            ], "Bps", "NCCL over EFA moves most bytes with RDMA reads on P5.", min_value=0),
            timeseries("Packets sent", [(per_device(c.EFA_TX_PKTS), dev)], "pps", min_value=0),
        ]),
        ("Trouble", [
            timeseries("Retransmit ratio", [(s(names.EFA_RETRANS_RATIO), dev)], "percentunit",
                       f"SRD packets retransmitted per packet sent; alert above {cfg.efa_retrans_ratio:.1%}.",
                       min_value=0),
            timeseries("Retransmit timeouts (path changes)", [(per_device(c.EFA_RETRANS_TIMEOUT_EVENTS, "increase"),  # noqa: E501
                                                                dev)], "short", min_value=0),
            timeseries("Impaired / unresponsive remotes", [
                (per_device(c.EFA_IMPAIRED_REMOTE_CONN_EVENTS, "increase"), f"{dev} impaired"),
                (per_device(c.EFA_UNRESPONSIVE_REMOTE_EVENTS, "increase"), f"{dev} unresponsive"),
            ], "short", "Peers rate-limited as impaired, or not answering.", min_value=0),
        ]),
        (None, [
            timeseries("RDMA work-request errors", [
                (queries.sum_of_counters(wr_err, W, (n, "device"), "increase", s("")), dev)
            ], "short", min_value=0),
            timeseries("Received packets dropped", [(per_device(c.EFA_RX_DROPS), dev)], "pps", min_value=0),
            timeseries("Admin command errors", [(per_device(cmds_err, "increase"), dev)], "short",
                       "Device-level cmds_err: the EFA device or its firmware is unwell.", min_value=0),
        ]),
    ]  # fmt: skip
    return dashboard(
        UID,
        "fleetscope / EFA network",
        "EFA traffic and SRD trouble counters per device.",
        [hostname_var(c.EFA_TX_BYTES, multi=True)],
        rows,
    )
