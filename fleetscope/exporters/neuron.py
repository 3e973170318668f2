"""``neuron`` collector: AWS Trainium and Inferentia nodes, from neuron-monitor's JSON reports.

Off by default (``--collector.neuron``). The reports come from either

* a ``neuron-monitor`` the collector runs and supervises (``--collector.neuron.monitor-path``,
  default ``neuron-monitor`` on ``$PATH``, else in ``/opt/aws/neuron/bin``;
  ``--collector.neuron.config`` is passed as ``-c``), or
* a file or FIFO that a sidecar writes (``--collector.neuron.report-file``; e.g.
  ``neuron-monitor > /run/neuron/reports``), followed like ``tail -F``.

A reader thread parses every line and keeps the latest good report converted into samples; a
scrape only copies them, so neither a slow, hung nor dead neuron-monitor ever blocks it. When there
is no report yet, or the latest is older than ``--collector.neuron.stale-after`` seconds, the
collector fails (``fleetscope_collector_success{collector="neuron"} 0``, counted as
``fleetscope_collector_errors_total{reason="no_report"|"stale"}``) and says why in one line, while
its own health (restarts, the last report's time) is still served; the supervisor restarts a neuron-monitor
that exits, hangs (no output for ``--collector.neuron.hang-after`` seconds) or prints garbage, with back-off
(:mod:`fleetscope.exporters.neuron_source`).

Series keep the names and labels of AWS's ``neuron-monitor-prometheus.py``
(:mod:`fleetscope.exporters.neuron_report`, docs/neuron.md) and add the node label, the Neuron
device of each core and the pod (from the report's ``neuron_k8s_info``) or Slurm job (files named
by Neuron device index in ``--collector.neuron.hpc-job-mapping-dir``, one job id a line, as the
GPU collector's) holding it.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric as MetricFamily

from fleetscope import contract as c
from fleetscope.argtypes import positive_float
from fleetscope.exporters import safe_read
from fleetscope.exporters.base import Collector, CollectorFailed, NodeContext
from fleetscope.exporters.neuron_report import (
    BadReport,
    Converter,
    Samples,
    families_order,
    k8s_labels,
    parse_line,
)
from fleetscope.exporters.neuron_source import FileFollower, Supervisor, find_monitor
from fleetscope.labels import cap

DEFAULT_STALE_AFTER = 30.0
DEFAULT_HANG_AFTER = 60.0


class NeuronCollector(Collector):
    name = "neuron"
    description = "AWS Trainium/Inferentia NeuronCores and devices from neuron-monitor reports"

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--collector.neuron.monitor-path",
            dest="neuron_monitor_path",
            default="neuron-monitor",
            help="neuron-monitor executable to run and supervise (default %(default)s, on $PATH or in "
            "/opt/aws/neuron/bin)",
        )
        parser.add_argument(
            "--collector.neuron.config",
            dest="neuron_config",
            default=None,
            help="neuron-monitor configuration file, passed as -c (default: neuron-monitor's own)",
        )
        parser.add_argument(
            "--collector.neuron.report-file",
            dest="neuron_report_file",
            default=None,
            help="read reports from this file or FIFO (a sidecar's neuron-monitor output) instead",
        )
        parser.add_argument(
            "--collector.neuron.stale-after",
            dest="neuron_stale_after",
            type=positive_float,
            default=DEFAULT_STALE_AFTER,
            help="seconds after which the latest report is stale and not served (default %(default)s)",
        )
        parser.add_argument(
            "--collector.neuron.hang-after",
            dest="neuron_hang_after",
            type=positive_float,
            default=DEFAULT_HANG_AFTER,
            help="seconds without output after which neuron-monitor is killed and restarted (default "
            "%(default)s)",
        )
        parser.add_argument(
            "--collector.neuron.hpc-job-mapping-dir",
            dest="neuron_hpc_job_mapping_dir",
            default=None,
            help="directory of files named by Neuron device index, each with the Slurm job ids using it",
        )

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        self.stale_after = ctx.option_float("neuron_stale_after", DEFAULT_STALE_AFTER)
        mapping = ctx.option_str("neuron_hpc_job_mapping_dir")
        self.mapping_dir = Path(mapping) if mapping else None
        self.converter = Converter(ctx.node_name, self._attribution, self.skip)
        self._lock = threading.Lock()
        self._latest: tuple[Samples, float] | None = None
        report_file = ctx.option_str("neuron_report_file")
        if report_file:
            self.source: Supervisor | FileFollower = FileFollower(Path(report_file), self._on_line)
        else:
            argv = [find_monitor(ctx.option_str("neuron_monitor_path", "neuron-monitor") or "neuron-monitor")]
            if config := ctx.option_str("neuron_config"):
                argv += ["-c", config]
            self.source = Supervisor(
                argv, self._on_line, hang_after=ctx.option_float("neuron_hang_after", DEFAULT_HANG_AFTER)
            )

    def _attribution(self, device: str, k8s: Mapping[str, Any] | None) -> tuple[str, str, str, str]:
        pod, namespace, container = k8s_labels(k8s)
        return (pod, namespace, container, self._hpc_job(device))

    def _hpc_job(self, device: str) -> str:
        if self.mapping_dir is None or not device:
            return ""
        try:
            text = safe_read.read_text(self.mapping_dir / device, 4096)
        except OSError:
            return ""
        return cap(",".join(line.strip() for line in text.splitlines() if line.strip()))[0]

    def _on_line(self, line: bytes) -> bool:
        """Reader thread: one line of neuron-monitor output. True when it was a good report."""
        try:
            report = parse_line(line)
        except BadReport as exc:
            self.skip("garbage", f"neuron-monitor printed a line that is no report: {exc}")
            return False
        samples, _devices = self.converter.convert(report)
        with self._lock:
            self._latest = (samples, time.time())
        return True

    def _problem(self) -> str:
        problem = self.source.last_problem
        return f"; neuron-monitor {problem}" if problem else ""

    def collect(self) -> Iterable[MetricFamily]:
        with self._lock:
            latest = self._latest
        health = self._health(None if latest is None else latest[1])
        if latest is None:
            self.skip("no_report", "no neuron-monitor report yet")
            raise CollectorFailed(f"no neuron-monitor report yet{self._problem()}", health)
        samples, at = latest
        age = time.time() - at
        if age > self.stale_after:
            self.skip("stale", "the latest neuron-monitor report is stale")
            raise CollectorFailed(
                f"latest neuron-monitor report is {age:.0f} s old (stale){self._problem()}", health
            )
        yield from self._families(samples)
        yield from health

    def _health(self, last_report: float | None) -> list[MetricFamily]:
        """The supervisor's own series: served whether or not the reports are."""
        node = [self.ctx.node_label]
        out: list[MetricFamily] = []
        if last_report is not None:
            last = GaugeMetricFamily(
                c.NEURON_MONITOR_LAST_REPORT, c.NEURON_MONITOR_LAST_REPORT.help, labels=node
            )
            last.add_metric([self.ctx.node_name], last_report)
            out.append(last)
        restarts = CounterMetricFamily(
            c.NEURON_MONITOR_RESTARTS.removesuffix("_total"),
            c.NEURON_MONITOR_RESTARTS.help,
            labels=[*node, "reason"],
        )
        for reason in c.NEURON_RESTART_REASONS:
            restarts.add_metric([self.ctx.node_name, reason], float(self.source.restarts.get(reason, 0)))
        out.append(restarts)
        return out

    def _families(self, samples: Samples) -> Iterable[MetricFamily]:
        for metric, rows in families_order(samples):
            keys = [self.ctx.node_label if k == c.NODE_LABEL else k for k in metric.labels]
            family: MetricFamily
            if metric.type == "counter":
                family = CounterMetricFamily(metric.removesuffix("_total"), metric.help, labels=keys)
            else:
                family = GaugeMetricFamily(metric, metric.help, labels=keys)
            for labels, value in rows:
                family.add_metric(list(labels), value)
            yield family

    def close(self) -> None:
        self.source.close()
