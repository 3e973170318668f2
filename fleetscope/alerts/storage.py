"""FSx for Lustre alerts: unhealthy client, throughput at the file system's limit, metadata latency.

"Throughput at its limit" is measured on the client side: the summed read+write byte rate of every
client of a file system, against the capacity configured in :class:`Thresholds`. Clients see every
byte, need no AWS credentials and have no CloudWatch lag (1-4 minutes, and no datapoint at all for
zero values); the price is that the capacity must be configured. The optional CloudWatch ``fsx_*``
gauges stay on the FSx dashboard for cross-checking.
"""

from __future__ import annotations

from fleetscope import contract as c
from fleetscope import queries
from fleetscope.alerts import names
from fleetscope.alerts.config import Thresholds
from fleetscope.alerts.model import Alert, Case, Fire, Group, InputSeries
from fleetscope.alerts.testdata import HOST, PEER, lustre, lustre_labels, num

_MOUNT = "Lustre mount {{ $labels.mount }} ({{ $labels.fs }}) on {{ $labels.Hostname }}"


def group(cfg: Thresholds) -> Group:
    rw = cfg.rate_window
    node = {c.NODE_LABEL: HOST}
    mount = (c.NODE_LABEL, "fs", "mount")
    cap = cfg.fsx_throughput_capacity_bytes_per_second
    limit_pct = num(cfg.fsx_throughput_limit_ratio * 100)
    throughput = queries.sum_of_counters(
        (c.LUSTRE_CLIENT_READ_BYTES, c.LUSTRE_CLIENT_WRITE_BYTES), rw, ("fs",)
    )
    md_ops = "|".join(c.LUSTRE_METADATA_OPERATIONS)
    per_minute = cap * 60 / 2  # two clients, half the capacity each: 100%
    alerts = (
        Alert(
            name="FleetscopeLustreClientUnhealthy",
            expr=f"{c.LUSTRE_CLIENT_HEALTHY} == 0",
            for_="2m",
            severity="critical",
            summary="A node's Lustre client reports itself unhealthy.",
            description="The Lustre client on {{ $labels.Hostname }} fails its health_check: I/O to FSx "
            "hangs or errors on this node.",
            cases=(
                Case(
                    "unhealthy",
                    (InputSeries(c.LUSTRE_CLIENT_HEALTHY, node, "1 0 0 0"),),
                    "3m",
                    (Fire(node, 0),),
                ),
                Case("healthy", (InputSeries(c.LUSTRE_CLIENT_HEALTHY, node, "1x3"),), "3m"),
            ),
        ),
        Alert(
            name="FleetscopeFsxThroughputAtLimit",
            expr=f"100 * {throughput} / {num(cap)} > {limit_pct}",
            for_="15m",
            severity="warning",
            summary="An FSx for Lustre file system runs at its throughput limit.",
            description="The clients of file system {{ $labels.fs }} move "
            '{{ printf "%.1f%%" $value }} of its configured throughput capacity '
            f"({num(cap / 1e6)} MB/s): I/O waits, checkpoints and data loading slow down.",
            cases=(
                Case(
                    "two clients at half each",
                    (
                        lustre(c.LUSTRE_CLIENT_READ_BYTES, f"0+{per_minute:.0f}x20"),
                        lustre(c.LUSTRE_CLIENT_WRITE_BYTES, f"0+{per_minute:.0f}x20", host=PEER),
                    ),
                    "20m",
                    (Fire({"fs": "fsx"}, 100),),
                ),
                Case("a quarter", (lustre(c.LUSTRE_CLIENT_READ_BYTES, f"0+{per_minute / 2:.0f}x20"),), "20m"),
            ),
        ),
        Alert(
            name="FleetscopeLustreMetadataLatencyHigh",
            expr=(
                f"{names.LUSTRE_METADATA_LATENCY} > {num(cfg.lustre_metadata_latency_seconds)}"
                f" and on ({', '.join(mount)}) sum by ({', '.join(mount)})"
                f' (rate({c.LUSTRE_CLIENT_OPERATIONS}{{operation=~"{md_ops}"}}[{rw}]))'
                f" > {num(cfg.lustre_metadata_min_ops_per_second)}"
            ),
            for_="10m",
            severity="warning",
            summary="Lustre metadata operations are slow on a client.",
            description=f'{_MOUNT} waits {{{{ printf "%.3f" $value }}}} s per metadata operation on '
            "average (open, getattr, ...): the metadata server is overloaded or the network to it is bad.",
            cases=(
                Case(
                    "50 ms opens",
                    (
                        lustre(c.LUSTRE_CLIENT_OPERATIONS, "0+600x20", operation="open"),
                        lustre(c.LUSTRE_CLIENT_OPERATION_SECONDS, "0+30x20", operation="open"),
                    ),
                    "20m",
                    (Fire(lustre_labels(), 0.05),),
                ),
                Case(
                    "1 ms opens",
                    (
                        lustre(c.LUSTRE_CLIENT_OPERATIONS, "0+600x20", operation="open"),
                        lustre(c.LUSTRE_CLIENT_OPERATION_SECONDS, "0+0.6x20", operation="open"),
                    ),
                    "20m",
                ),
                Case(
                    "one slow open a minute is noise",
                    (
                        lustre(c.LUSTRE_CLIENT_OPERATIONS, "0+1x20", operation="open"),
                        lustre(c.LUSTRE_CLIENT_OPERATION_SECONDS, "0+0.5x20", operation="open"),
                    ),
                    "20m",
                ),
            ),
        ),
    )
    return Group("storage", alerts)
