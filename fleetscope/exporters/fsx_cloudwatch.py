"""``fsx_cloudwatch`` collector (off by default): server-side FSx for Lustre metrics from CloudWatch.

AWS runs the Lustre servers of FSx, so what they see (bytes and operations across all clients, free
capacity) is only available from CloudWatch (namespace ``AWS/FSx``, dimension ``FileSystemId``).
Each metric becomes a gauge named by :func:`fleetscope.contract.fsx_metric_name`
(``DataReadBytes`` -> ``fsx_data_read_bytes``) with labels ``FileSystemId`` and the node label.

Cost and freshness. CloudWatch publishes one datapoint a minute, one to a few minutes late, and
``GetMetricData`` is billed per metric requested. So the collector asks at most once per
``--collector.fsx_cloudwatch.cache-seconds`` (default: the period), with ONE call for all metrics of
all file systems (up to 500 per call), and serves the cached values on the scrapes in between.
Enable it on one exporter per cluster (or per file system), not on every node: each enabled
exporter pays for its own requests.

Values are the statistic over the latest complete period: ``Sum`` for the ``Data*`` and
``MetadataOperations`` metrics (bytes or operations in the period; divide by the period for a rate)
and for ``FreeDataStorageCapacity`` (bytes free across all OSTs). CloudWatch sends no datapoint for
a period whose value is 0; a ``Sum`` metric without datapoints is served as 0 when the same file
system has other datapoints in the answer (so it exists and reports), and left out otherwise.

When a fetch fails (throttling, permissions, network), the collector reports
``fleetscope_collector_success{collector="fsx_cloudwatch"} 0`` and serves no ``fsx_*`` series until
the next attempt one cache interval later. It deliberately does not serve the previous values as if
they were current: a flat line would look like a live measurement. Those values are not lost, since
Prometheus already stored them; the gap and ``success 0`` are what an alert should see. Other
collectors are unaffected.
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric as MetricFamily

from fleetscope import contract
from fleetscope.exporters.base import Collector, NodeContext

NAMESPACE = "AWS/FSx"
#: CloudWatch metric -> statistic requested (FSx for Lustre user guide, "metrics and dimensions").
DEFAULT_METRICS: dict[str, str] = {
    "DataReadBytes": "Sum",
    "DataWriteBytes": "Sum",
    "DataReadOperations": "Sum",
    "DataWriteOperations": "Sum",
    "MetadataOperations": "Sum",
    "FreeDataStorageCapacity": "Sum",
    # The guide gives no statistic for ClientConnections; the maximum over the period is the
    # conservative reading of "number of active connections".
    "ClientConnections": "Maximum",
}
#: Metrics whose missing datapoint means 0 (CloudWatch omits zero-valued periods).
_ZERO_WHEN_ABSENT = frozenset(
    {"DataReadBytes", "DataWriteBytes", "DataReadOperations", "DataWriteOperations", "MetadataOperations"}
)
_FILE_SYSTEM_ID = re.compile(r"^fs-[0-9a-f]{8,17}$")
_METRIC_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")
_STATISTICS = ("Sum", "Average", "Minimum", "Maximum", "SampleCount")
#: GetMetricData accepts at most this many queries per call.
_MAX_QUERIES = 500
#: How many periods back to look for the latest datapoint (FSx publishes 1-4 minutes late).
_LOOKBACK_PERIODS = 10


class CloudWatchFetchError(RuntimeError):
    """A GetMetricData call failed; the message says why (raised from :meth:`collect`)."""


@dataclass(frozen=True, slots=True)
class _Query:
    id: str
    file_system_id: str
    metric: str
    statistic: str


def parse_metrics(spec: str | None) -> dict[str, str]:
    """``"DataReadBytes,ClientConnections:Average"`` -> metric -> statistic (default ``Sum``)."""
    if not spec:
        return dict(DEFAULT_METRICS)
    metrics = {}
    for item in spec.split(","):
        name, _, stat = item.strip().partition(":")
        stat = stat or DEFAULT_METRICS.get(name, "Sum")
        if not _METRIC_NAME.match(name) or stat not in _STATISTICS:
            raise ValueError(
                f"bad --collector.fsx_cloudwatch.metrics entry {item.strip()!r} "
                f"(want Name or Name:Statistic, statistic one of {', '.join(_STATISTICS)})"
            )
        metrics[name] = stat
    return metrics


def parse_file_system_ids(spec: str | None) -> list[str]:
    ids = [s.strip() for s in (spec or "").split(",") if s.strip()]
    if not ids:
        raise ValueError("no file systems: set --collector.fsx_cloudwatch.file-system-ids=fs-...")
    bad = [i for i in ids if not _FILE_SYSTEM_ID.match(i)]
    if bad:
        raise ValueError(f"not FSx file system ids: {', '.join(bad)} (want fs-0123456789abcdef0)")
    return list(dict.fromkeys(ids))


class FsxCloudWatchCollector(Collector):
    name = "fsx_cloudwatch"
    description = (
        "server-side FSx for Lustre metrics from CloudWatch AWS/FSx (needs boto3 and AWS credentials)"
    )

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        p = "--collector.fsx_cloudwatch."
        parser.add_argument(
            p + "file-system-ids",
            dest="fsx_cloudwatch_file_system_ids",
            default=None,
            help="comma-separated FSx file system ids (fs-...) to read from CloudWatch",
        )
        parser.add_argument(
            p + "region",
            dest="fsx_cloudwatch_region",
            default=None,
            help="AWS region of the file systems (default: AWS_REGION / AWS_DEFAULT_REGION / AWS config)",
        )
        parser.add_argument(
            p + "period",
            dest="fsx_cloudwatch_period",
            type=int,
            default=60,
            help="CloudWatch period in seconds, a multiple of 60 (default 60)",
        )
        parser.add_argument(
            p + "cache-seconds",
            dest="fsx_cloudwatch_cache_seconds",
            type=float,
            default=None,
            help="fetch from CloudWatch at most this often and serve cached values in between "
            "(GetMetricData is billed per metric requested; default: the period)",
        )
        parser.add_argument(
            p + "metrics",
            dest="fsx_cloudwatch_metrics",
            default=None,
            help="comma-separated AWS/FSx metrics, each Name or Name:Statistic "
            f"(default {','.join(DEFAULT_METRICS)})",
        )

    def __init__(
        self,
        ctx: NodeContext,
        client: Any = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(ctx)
        self.file_system_ids = parse_file_system_ids(ctx.option_str("fsx_cloudwatch_file_system_ids"))
        self.metrics = parse_metrics(ctx.option_str("fsx_cloudwatch_metrics"))
        self.period = ctx.option_int("fsx_cloudwatch_period", 60)
        if self.period < 60 or self.period % 60:
            raise ValueError(f"--collector.fsx_cloudwatch.period must be a multiple of 60, got {self.period}")
        self.cache_seconds = ctx.option_float("fsx_cloudwatch_cache_seconds", float(self.period))
        if self.cache_seconds < 1:
            raise ValueError("--collector.fsx_cloudwatch.cache-seconds must be at least 1")
        self._clock = clock
        self._wall_clock = wall_clock
        self._client = (
            client if client is not None else self._make_client(ctx.option_str("fsx_cloudwatch_region"))
        )
        pairs = [(fs, metric, stat) for fs in self.file_system_ids for metric, stat in self.metrics.items()]
        self._queries = [_Query(f"q{i}", fs, metric, stat) for i, (fs, metric, stat) in enumerate(pairs)]
        self._values: dict[tuple[str, str], float] = {}
        self._error: str | None = None
        self._next_fetch = -float("inf")

    @staticmethod
    def _make_client(region: str | None) -> Any:
        try:
            import boto3  # the node agent needs boto3 only when this collector is on
        except ImportError as exc:
            raise RuntimeError("boto3 is not installed: pip install 'fleetscope[aws]'") from exc
        return boto3.session.Session().client("cloudwatch", region_name=region or None)

    # ---- fetching ------------------------------------------------------------------------------

    def _window(self) -> tuple[dt.datetime, dt.datetime]:
        """The lookback window, ending at the start of the current (incomplete) period."""
        now = self._wall_clock()
        end = (int(now) // self.period) * self.period
        start = end - self.period * _LOOKBACK_PERIODS
        utc = dt.UTC
        return dt.datetime.fromtimestamp(start, utc), dt.datetime.fromtimestamp(end, utc)

    def _request(self, queries: list[_Query], start: dt.datetime, end: dt.datetime) -> list[dict]:
        params: dict[str, Any] = {
            "MetricDataQueries": [
                {
                    "Id": q.id,
                    "MetricStat": {
                        "Metric": {
                            "Namespace": NAMESPACE,
                            "MetricName": q.metric,
                            "Dimensions": [{"Name": "FileSystemId", "Value": q.file_system_id}],
                        },
                        "Period": self.period,
                        "Stat": q.statistic,
                    },
                    "ReturnData": True,
                }
                for q in queries
            ],
            "StartTime": start,
            "EndTime": end,
            "ScanBy": "TimestampDescending",
        }
        results: list[dict] = []
        while True:
            answer = self._client.get_metric_data(**params)
            results.extend(answer.get("MetricDataResults", []))
            token = answer.get("NextToken")
            if not token:
                return results
            params["NextToken"] = token

    def _fetch(self) -> dict[tuple[str, str], float]:
        from botocore.exceptions import BotoCoreError, ClientError

        start, end = self._window()
        by_id = {q.id: q for q in self._queries}
        latest: dict[str, tuple[dt.datetime, float]] = {}
        complete: set[str] = set()
        try:
            for i in range(0, len(self._queries), _MAX_QUERIES):
                for r in self._request(self._queries[i : i + _MAX_QUERIES], start, end):
                    qid = r.get("Id")
                    if qid not in by_id:
                        continue
                    status = r.get("StatusCode", "Complete")
                    if status not in ("Complete", "PartialData"):
                        q = by_id[qid]
                        self.skip("cloudwatch_query", f"{q.file_system_id} {q.metric}: status {status}")
                        continue
                    complete.add(qid)
                    for ts, value in zip(r.get("Timestamps", []), r.get("Values", []), strict=False):
                        if qid not in latest or ts > latest[qid][0]:
                            latest[qid] = (ts, float(value))
        except ClientError as exc:
            err = exc.response.get("Error", {})
            raise CloudWatchFetchError(
                f"CloudWatch GetMetricData failed: {err.get('Code', 'ClientError')}: "
                f"{err.get('Message', exc)}"
            ) from exc
        except BotoCoreError as exc:
            raise CloudWatchFetchError(f"CloudWatch GetMetricData failed: {exc}") from exc
        reporting = {by_id[qid].file_system_id for qid in latest}
        values: dict[tuple[str, str], float] = {}
        for q in self._queries:
            if q.id in latest:
                values[(q.metric, q.file_system_id)] = latest[q.id][1]
            elif q.id in complete and q.metric in _ZERO_WHEN_ABSENT and q.file_system_id in reporting:
                values[(q.metric, q.file_system_id)] = 0.0
        return values

    # ---- series --------------------------------------------------------------------------------

    def collect(self) -> Iterable[MetricFamily]:
        now = self._clock()
        if now >= self._next_fetch:
            self._next_fetch = now + self.cache_seconds
            try:
                self._values = self._fetch()
                if self._error is not None:
                    self.log.warning("CloudWatch answers again; serving fresh fsx_* values")
                self._error = None
            except CloudWatchFetchError as exc:
                self._error = str(exc)
                self.log.error(
                    "%s; serving no fsx_* series (not the previous values) until the next attempt in %.0f s",
                    exc,
                    self.cache_seconds,
                )
        if self._error is not None:
            raise CloudWatchFetchError(self._error)
        return self._families()

    def _families(self) -> list[MetricFamily]:
        families: list[MetricFamily] = []
        node = self.ctx.node_name
        for metric, stat in self.metrics.items():
            name = contract.fsx_metric_name(metric)
            family = GaugeMetricFamily(
                name,
                f"CloudWatch {NAMESPACE} {metric}, {stat} over the latest complete {self.period} s period "
                f"(server side; fetched at most every {self.cache_seconds:g} s and cached in between, "
                "since GetMetricData is billed per metric).",
                labels=["FileSystemId", self.ctx.node_label],
            )
            for fs in self.file_system_ids:
                value = self._values.get((metric, fs))
                if value is not None:
                    family.add_metric([fs, node], value)
            if family.samples:
                families.append(family)
        return families
