"""EFA alerts: retransmits, SRD timeouts, impaired or unresponsive peers, WR errors, a silent device."""

from __future__ import annotations

from fleetscope import contract as c
from fleetscope import queries
from fleetscope.alerts import names
from fleetscope.alerts.config import Thresholds
from fleetscope.alerts.model import Alert, Case, Fire, Group
from fleetscope.alerts.testdata import efa, efa_labels, num

_DEV = "EFA device {{ $labels.device }} on {{ $labels.Hostname }}"
_EFA_ID = (c.NODE_LABEL, "device", "port")


def _event_alert(
    name: str, metric: str, threshold: float, summary: str, meaning: str, cfg: Thresholds
) -> Alert:
    w = cfg.event_window
    over = int(threshold) + 2
    return Alert(
        name=name,
        expr=f"increase({metric}[{w}]) > {num(threshold)}",
        severity="warning",
        summary=summary,
        description=f'{_DEV} counted {{{{ printf "%.0f" $value }}}} {meaning} in {w}.',
        cases=(
            Case(f"{over} events", (efa(metric, f"0x10 {over} {over}"),), "12m", (Fire(efa_labels(), over),)),
            Case("none new", (efa(metric, "7x12"),), "12m"),
        ),
    )


def group(cfg: Thresholds) -> Group:
    rw = cfg.rate_window
    wr_err = (c.EFA_RDMA_READ_WR_ERR, c.EFA_RDMA_WRITE_WR_ERR)
    ratio_pct = num(cfg.efa_retrans_ratio * 100)
    alerts = (
        Alert(
            name="FleetscopeEfaRetransmitRatioHigh",
            expr=(
                f"{names.EFA_RETRANS_RATIO} * 100 > {ratio_pct} and on ({', '.join(_EFA_ID)}) "
                f"rate({c.EFA_TX_PKTS}[{rw}]) > {num(cfg.efa_min_tx_pkts_per_second)}"
            ),
            for_="10m",
            severity="warning",
            summary="An EFA device retransmits a large share of its packets.",
            description=f'{_DEV} retransmits {{{{ printf "%.2f%%" $value }}}} of its packets '
            f"(above {ratio_pct}%): a lossy or congested path slows every collective through it.",
            cases=(
                Case(
                    "2% of 1000 pkt/s",
                    (efa(c.EFA_TX_PKTS, "0+60000x20"), efa(c.EFA_RETRANS_PKTS, "0+1200x20")),
                    "20m",
                    (Fire(efa_labels(), 2),),
                ),
                Case(
                    "1% of 1000 pkt/s",
                    (efa(c.EFA_TX_PKTS, "0+60000x20"), efa(c.EFA_RETRANS_PKTS, "0+600x20")),
                    "20m",
                    (Fire(efa_labels(), 1),),
                ),
                Case("0.2%", (efa(c.EFA_TX_PKTS, "0+60000x20"), efa(c.EFA_RETRANS_PKTS, "0+120x20")), "20m"),
                Case(
                    "noise on an idle device",
                    (efa(c.EFA_TX_PKTS, "0+600x20"), efa(c.EFA_RETRANS_PKTS, "0+60x20")),
                    "20m",
                ),
            ),
        ),
        _event_alert(
            "FleetscopeEfaRetransmitTimeouts",
            c.EFA_RETRANS_TIMEOUT_EVENTS,
            cfg.efa_retrans_timeouts_per_window,
            "An EFA device keeps timing out and changing SRD paths.",
            "SRD retransmit timeouts (path changes)",
            cfg,
        ),
        _event_alert(
            "FleetscopeEfaImpairedRemoteConnections",
            c.EFA_IMPAIRED_REMOTE_CONN_EVENTS,
            0,
            "An EFA device rate-limits connections to impaired peers.",
            "connections that turned impaired (rate-limited)",
            cfg,
        ),
        _event_alert(
            "FleetscopeEfaUnresponsiveRemote",
            c.EFA_UNRESPONSIVE_REMOTE_EVENTS,
            0,
            "An EFA device found remote peers unresponsive.",
            "unresponsive remote peers (dead or hung)",
            cfg,
        ),
        Alert(
            name="FleetscopeEfaWorkRequestErrors",
            expr=f"{queries.sum_of_counters(wr_err, cfg.event_window, _EFA_ID, 'increase')} > 0",
            severity="warning",
            summary="RDMA work requests fail on an EFA device.",
            description=f'{_DEV} failed {{{{ printf "%.0f" $value }}}} RDMA read/write work requests in '
            f"{cfg.event_window}.",
            cases=(
                Case(
                    "read errors, write counter absent (old driver)",
                    (efa(wr_err[0], "0x10 4 4"),),
                    "12m",
                    (Fire(efa_labels(), 4),),
                ),
                Case("no errors", (efa(wr_err[0], "2x12"), efa(wr_err[1], "0x12")), "12m"),
            ),
        ),
        Alert(
            name="FleetscopeEfaDeviceIdle",
            expr=(
                f"rate({c.EFA_TX_BYTES}[{rw}]) == 0 and on ({c.NODE_LABEL}) max by ({c.NODE_LABEL}) "
                f"(rate({c.EFA_TX_BYTES}[{rw}])) > {num(cfg.efa_busy_tx_bytes_per_second)}"
            ),
            for_="10m",
            severity="warning",
            summary="An EFA device sends nothing while its node's other devices carry traffic.",
            description=f"{_DEV} has sent nothing for 10m while the node's other EFA devices carry "
            "traffic: NCCL lost it from its rings, or its link is down.",
            cases=(
                Case(
                    "one of two silent",
                    (efa(c.EFA_TX_BYTES, "0+6e9x20"), efa(c.EFA_TX_BYTES, "5x20", device="rdmap32s27")),
                    "20m",
                    (Fire(efa_labels("rdmap32s27"), 0),),
                ),
                Case(
                    "whole node idle",
                    (efa(c.EFA_TX_BYTES, "5x20"), efa(c.EFA_TX_BYTES, "5x20", device="rdmap32s27")),
                    "20m",
                ),
            ),
        ),
    )
    return Group("network", alerts)
