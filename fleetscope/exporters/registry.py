"""The collectors the exporter knows, and the prometheus_client collector that runs them.

Collector classes are named here by import path and imported only when enabled, so a collector
whose dependency is missing fails alone (``success 0``) instead of keeping the exporter from
starting.
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from collections.abc import Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric as MetricFamily

from fleetscope import __version__, contract
from fleetscope.exporters.base import Collector, NodeContext

log = logging.getLogger(__name__)

#: name -> ("module:Class", enabled by default). Order is the order of collection. The default
#: lives here, not on the class, so a collector whose module fails to import still runs (as a
#: failing stub reporting success 0) instead of silently vanishing.
KNOWN_COLLECTORS: dict[str, tuple[str, bool]] = {
    "gpu": ("fleetscope.exporters.gpu.collector:GpuCollector", True),
    "xid": ("fleetscope.exporters.gpu.xid:XidCollector", True),
    "efa": ("fleetscope.exporters.efa:EfaCollector", True),
    "lustre": ("fleetscope.exporters.lustre:LustreCollector", True),
    "training": ("fleetscope.exporters.training:TrainingCollector", True),
    # Server-side FSx metrics from CloudWatch: needs AWS credentials and boto3, so opt-in.
    "fsx_cloudwatch": ("fleetscope.exporters.fsx_cloudwatch:FsxCloudWatchCollector", False),
}


def collector_class(name: str) -> type[Collector]:
    module, _, cls = KNOWN_COLLECTORS[name][0].partition(":")
    return getattr(importlib.import_module(module), cls)


class _Broken(Collector):
    """Stands in for a collector that could not be imported or constructed."""

    name = "broken"

    def __init__(self, ctx: NodeContext, name: str, reason: str) -> None:
        self.name = name  # before super().__init__, which names the logger
        super().__init__(ctx)
        self.reason = reason

    def collect(self) -> Iterable[MetricFamily]:
        raise RuntimeError(self.reason)


def build_collectors(names: Iterable[str], ctx: NodeContext) -> list[Collector]:
    """Instantiate the named collectors; one that fails to load is replaced by a failing stub."""
    collectors: list[Collector] = []
    for name in names:
        try:
            collectors.append(collector_class(name)(ctx))
        except Exception as exc:  # noqa: BLE001 - any failure must stay local to this collector
            reason = f"collector {name} could not start: {exc}"
            log.error("%s", reason)
            collectors.append(_Broken(ctx, name, reason))
    return collectors


class NodeCollector:
    """Runs every enabled collector on each scrape; a collector that raises never fails the scrape.

    Scrapes are serialised with a lock: collectors keep small caches (NVML handles, file offsets)
    and Prometheus scrapes one target at a time anyway.
    """

    def __init__(self, collectors: list[Collector]) -> None:
        self.collectors = collectors
        self._lock = threading.Lock()

    def collect(self) -> Iterator[MetricFamily]:
        with self._lock:
            success = GaugeMetricFamily(
                contract.COLLECTOR_SUCCESS, contract.COLLECTOR_SUCCESS.help, labels=["collector"]
            )
            duration = GaugeMetricFamily(
                contract.COLLECTOR_DURATION, contract.COLLECTOR_DURATION.help, labels=["collector"]
            )
            errors = CounterMetricFamily(
                contract.COLLECTOR_ERRORS.removesuffix("_total"),
                contract.COLLECTOR_ERRORS.help,
                labels=["collector", "reason"],
            )
            for c in self.collectors:
                start = time.perf_counter()
                try:
                    families = list(c.collect())
                    ok = 1.0
                except Exception as exc:
                    log.warning(
                        "collector %s failed: %s", c.name, exc, exc_info=log.isEnabledFor(logging.DEBUG)
                    )
                    families, ok = [], 0.0
                duration.add_metric([c.name], time.perf_counter() - start)
                success.add_metric([c.name], ok)
                for reason, count in sorted(c.error_counts().items()):
                    errors.add_metric([c.name, reason], count)
                yield from families
            build = GaugeMetricFamily(
                contract.EXPORTER_BUILD_INFO, contract.EXPORTER_BUILD_INFO.help, labels=["version"]
            )
            build.add_metric([__version__], 1)
            yield build
            yield success
            yield duration
            yield errors

    def close(self) -> None:
        for c in self.collectors:
            try:
                c.close()
            except Exception as exc:  # noqa: BLE001
                log.warning("collector %s did not close cleanly: %s", c.name, exc)
