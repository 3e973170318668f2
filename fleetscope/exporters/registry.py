"""The collectors the exporter knows, and the prometheus_client collector that runs them.

Collector classes are named here by import path and imported only when enabled, so a collector
whose dependency is missing fails alone (``success 0``) instead of keeping the exporter from
starting.
"""

from __future__ import annotations

import importlib
import logging
import re
import threading
import time
from collections.abc import Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric as MetricFamily

from fleetscope import __version__, contract
from fleetscope.exporters.base import Collector, CollectorFailed, NodeContext
from fleetscope.exporters.gpu.deadline import Busy, DeadlineExceeded, DeadlineWorker

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
    # AWS Trainium/Inferentia: runs neuron-monitor (or reads a sidecar's reports), so opt-in.
    "neuron": ("fleetscope.exporters.neuron:NeuronCollector", False),
    # NCCL RAS of the jobs whose rank 0 runs here: talks to the jobs' processes, so opt-in.
    "nccl_ras": ("fleetscope.exporters.nccl_ras:NcclRasCollector", False),
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


#: Seconds a scrape waits for the collectors (all run at once); Prometheus' default scrape
#: timeout is 10 s, so the self-metrics still get out in time.
DEFAULT_TIMEOUT = 8.0


def _collect(c: Collector) -> tuple[list[MetricFamily], float]:
    start = time.perf_counter()
    families = list(c.collect())
    return families, time.perf_counter() - start


def renderable(value: object) -> bool:
    """True if the text format can print ``value`` (a float, or an int within float range)."""
    if type(value) is float:
        return True
    if isinstance(value, str | bytes | bytearray):
        return False  # float() would parse some, the encoder would not
    try:
        float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return False
    return True


def vet(c: Collector, families: list[MetricFamily]) -> list[MetricFamily]:
    """``families`` without the samples that cannot be rendered or exceed ``c.max_series``.

    Both are counted in ``fleetscope_collector_errors_total{reason="unrenderable"|"series_limit"}``,
    so one bad value never fails the scrape (the text encoder would raise on it, losing every
    collector's series) and one collector cannot flood the exposition.
    """
    budget = c.max_series
    dropped_bad = dropped_over = 0
    for family in families:
        samples = family.samples
        if not all(type(s.value) is float for s in samples):
            good = [s for s in samples if renderable(s.value)]
            if len(good) != len(samples):
                dropped_bad += len(samples) - len(good)
                bad = next(s for s in samples if not renderable(s.value))
                c.skip(
                    "unrenderable", f"{bad.name}: value {str(bad.value)[:40]!r}...", len(samples) - len(good)
                )
            samples = family.samples = good
        if len(samples) > budget:
            dropped_over += len(samples) - budget
            family.samples = samples[:budget]
        budget -= len(family.samples)
    if dropped_over:
        c.skip("series_limit", f"over {c.max_series} series in one scrape; the rest dropped", dropped_over)
    return [f for f in families if f.samples] if dropped_bad or dropped_over else families


class NodeCollector:
    """Runs every enabled collector on each scrape; a collector that raises never fails the scrape.

    Each collector runs in its own :class:`~fleetscope.exporters.gpu.deadline.DeadlineWorker`, all
    at once, and the scrape waits for them at most ``timeout`` seconds (a collector may ask for
    more with :meth:`Collector.deadline`). One that misses the deadline is reported
    ``success 0`` (reason ``deadline``) and the others are served; until its stuck call returns, it
    is not started again (``success 0``, reason ``still_running``), so a read that never returns
    costs one thread, never one per scrape.

    Scrapes are serialised with a lock: collectors keep small caches (NVML handles, file offsets)
    and Prometheus scrapes one target at a time anyway.
    """

    def __init__(self, collectors: list[Collector], timeout: float = DEFAULT_TIMEOUT) -> None:
        self.collectors = collectors
        self.timeout = timeout
        self._lock = threading.Lock()
        self._workers: dict[int, tuple[Collector, DeadlineWorker]] = {}
        #: Per failing collector, its failure as last logged, digits masked (see :meth:`_failed`).
        self._failing: dict[str, str] = {}

    def _failed(self, c: Collector, exc: Exception) -> None:
        """Log a collector's failure once while it stays the same: a report "41 s old", then "56 s
        old" is one failure, not a line per scrape; a different one, or the same after a success,
        is logged again."""
        kind = re.sub(r"[0-9.]+", "#", f"{type(exc).__name__}: {exc}")
        if self._failing.get(c.name) == kind:
            log.debug("collector %s still failing: %s", c.name, exc)
            return
        self._failing[c.name] = kind
        log.warning("collector %s failed: %s", c.name, exc, exc_info=log.isEnabledFor(logging.DEBUG))

    def _worker(self, c: Collector) -> DeadlineWorker:
        entry = self._workers.get(id(c))
        if entry is None or entry[0] is not c:
            entry = self._workers[id(c)] = (c, DeadlineWorker(f"collector-{c.name}"))
        return entry[1]

    def _run_all(self) -> list[tuple[Collector, list[MetricFamily], float, float]]:
        """``(collector, families, success, seconds)`` of every collector, in their order."""
        began = time.monotonic()
        started = []
        for c in self.collectors:
            worker = self._worker(c)
            try:
                job = worker.submit(_collect, c)
            except Busy:
                job = None
            started.append((c, worker, job))
        out = []
        for c, worker, job in started:
            families: list[MetricFamily] = []
            ok = 0.0
            if job is None:
                c.skip(
                    "still_running",
                    f"collector {c.name}: the last scrape's run has not returned; not started again",
                )
                seconds = 0.0
            else:
                wait = max(0.0, began + c.deadline(self.timeout) - time.monotonic())
                try:
                    families, seconds = worker.wait(job, wait)
                    families, ok = vet(c, families), 1.0
                    self._failing.pop(c.name, None)
                except DeadlineExceeded:
                    seconds = time.monotonic() - began
                    c.skip("deadline", f"collector {c.name}: no answer within {c.deadline(self.timeout):g}s")
                except Exception as exc:  # noqa: BLE001 - logged by _failed; never fails the scrape
                    seconds = time.monotonic() - began
                    self._failed(c, exc)
                    if isinstance(exc, CollectorFailed):
                        families = vet(c, exc.families)
            out.append((c, families, ok, seconds))
        return out

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
            for c, families, ok, seconds in self._run_all():
                duration.add_metric([c.name], seconds)
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
        for _, worker in self._workers.values():
            worker.close()
        self._workers.clear()
