"""``nccl_ras`` collector: what NCCL's RAS says about the collectives of the jobs on this node.

NCCL >= 2.24 runs RAS in every process; one query of any process returns every rank of the job
(its communicators, each rank's launched-collective counts, the ranks it cannot reach). So one node
per job asks: the node that runs the job's rank 0 (it finds the job's ``NCCL_RAS_ADDR`` in rank 0's
telemetry file, written by :mod:`fleetscope.telemetry`), or the nodes given addresses explicitly
(``--collector.nccl_ras.address JOB=HOST:PORT``). The others stay quiet.

Off by default (``--collector.nccl_ras``). Each scrape asks every job's RAS at once, each query
bounded by ``--collector.nccl_ras.timeout`` and ``--collector.nccl_ras.max-reply-bytes``
(:mod:`fleetscope.exporters.ras_client`), so a slow, dead or hostile RAS never holds the scrape; a
job's RAS is asked at most once per ``--collector.nccl_ras.min-interval`` (two Prometheus replicas
do not double the load on the job), and a RAS whose failures held the scrape is asked ever less
often, up to once a minute (:func:`next_ask`), so it does not hold every scrape. The report
becomes bounded series (:mod:`fleetscope.exporters.ras_series`, docs/metrics.md#nccl_ras);
``nccl_ras_up{job_id}`` says whether the last query answered. Failures count in
``fleetscope_collector_errors_total{collector="nccl_ras", reason}``: ``unreachable``,
``timeout``, ``oversize``, ``protocol``, ``malformed`` (the report does not parse),
``still_running`` (the last query of that job has not returned), ``discovery`` (a rank file whose
RAS address is not a loopback one), ``label_cut``.
"""

from __future__ import annotations

import argparse
import ipaddress
import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric as MetricFamily

from fleetscope import contract
from fleetscope.argtypes import positive_float, positive_int
from fleetscope.exporters import safe_read
from fleetscope.exporters.base import Collector, NodeContext
from fleetscope.exporters.ras_client import DEFAULT_MAX_BYTES, RasQueryError, parse_address, query
from fleetscope.exporters.ras_series import DEFAULT_MAX_COMMUNICATORS, RasSeries, report_series
from fleetscope.hang.ras_parse import RasParseError, parse_reports
from fleetscope.labels import cap
from fleetscope.textformat import unescape_label_value

DEFAULT_TIMEOUT = 4.0
DEFAULT_MIN_INTERVAL = 10.0
#: Failures that held the scrape (no answer within the deadline, a report over the byte limit, the
#: last query still running) are not asked again at once: the wait doubles from the minimum
#: interval with each one in a row, up to this; a failure that cost nothing (nothing listens, not
#: NCCL's protocol, a report that does not parse) waits the minimum interval, as an answer does.
SLOW_FAILURES = frozenset({"timeout", "oversize", "still_running"})
MAX_BACKOFF = 60.0
#: Jobs one node asks at most (a node runs a handful of jobs, one per GPU at most).
MAX_JOBS = 16
#: Rank files read for discovery at most, and how fresh rank 0's file must be (its writer lives).
MAX_DISCOVERY_FILES = 64
DISCOVERY_TTL = 120.0
#: The header field the telemetry writer puts NCCL_RAS_ADDR in.
HEADER_FIELD = "nccl_ras_addr"
_JOB_ID = re.compile(r'job_id="((?:[^"\\\n]|\\.)*)"')


@dataclass(frozen=True)
class Target:
    job_id: str
    host: str
    port: int


def parse_targets(values: Iterable[str]) -> list[Target]:
    """``JOB=HOST:PORT`` entries (each value may hold several, comma-separated)."""
    out: list[Target] = []
    for value in values:
        for item in (v.strip() for v in value.split(",")):
            if not item:
                continue
            job, sep, addr = item.partition("=")
            if not sep or not job.strip():
                raise ValueError(f"--collector.nccl_ras.address wants JOB=HOST:PORT, got {item!r}")
            host, port = parse_address(addr)
            out.append(Target(job.strip(), host, port))
    return out


def _target_list(text: str) -> str:
    try:
        parse_targets([text])
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class _Last:
    """The last query of one target: when it ended, its series (None: it failed), and the slow
    failures in a row that ended with it."""

    at: float
    series: RasSeries | None
    slow_failures: int = 0


def next_ask(last: _Last, min_interval: float) -> float:
    """When a target whose last query is ``last`` is asked again: ``min_interval`` after it, twice
    that after two slow failures in a row, four times after three, ... up to :data:`MAX_BACKOFF`
    (never under ``min_interval``)."""
    if not last.slow_failures:
        return last.at + min_interval
    wait = min_interval * 2.0 ** min(last.slow_failures - 1, 16)
    return last.at + max(min_interval, min(wait, MAX_BACKOFF))


class NcclRasCollector(Collector):
    name = "nccl_ras"
    description = "NCCL RAS of the jobs whose rank 0 runs here: per communicator op-count skew, missing ranks"

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--collector.nccl_ras.address",
            dest="nccl_ras_address",
            metavar="JOB=HOST:PORT",
            action="append",
            type=_target_list,
            default=None,
            help="ask this job's RAS at HOST:PORT (its NCCL_RAS_ADDR; repeatable or comma-separated); "
            "without any, jobs are discovered from the rank-0 files in --collector.training.directory",
        )
        parser.add_argument(
            "--collector.nccl_ras.timeout",
            dest="nccl_ras_timeout",
            metavar="SECONDS",
            type=positive_float,
            default=DEFAULT_TIMEOUT,
            help="a query's whole budget: connect, handshake and report (default %(default)s)",
        )
        parser.add_argument(
            "--collector.nccl_ras.max-reply-bytes",
            dest="nccl_ras_max_reply_bytes",
            metavar="BYTES",
            type=positive_int,
            default=DEFAULT_MAX_BYTES,
            help="refuse a report longer than this (default %(default)s)",
        )
        parser.add_argument(
            "--collector.nccl_ras.max-communicators",
            dest="nccl_ras_max_communicators",
            metavar="N",
            type=positive_int,
            default=DEFAULT_MAX_COMMUNICATORS,
            help="communicators served per job, the most telling first (default %(default)s)",
        )
        parser.add_argument(
            "--collector.nccl_ras.min-interval",
            dest="nccl_ras_min_interval",
            metavar="SECONDS",
            type=positive_float,
            default=DEFAULT_MIN_INTERVAL,
            help="ask a job's RAS at most this often; scrapes in between serve the last answer "
            "(default %(default)s)",
        )

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        raw = ctx.option("nccl_ras_address") or []
        self.static = parse_targets(raw if isinstance(raw, list) else [str(raw)])
        self.timeout = ctx.option_float("nccl_ras_timeout", DEFAULT_TIMEOUT)
        self.max_bytes = ctx.option_int("nccl_ras_max_reply_bytes", DEFAULT_MAX_BYTES)
        self.max_comms = ctx.option_int("nccl_ras_max_communicators", DEFAULT_MAX_COMMUNICATORS)
        self.min_interval = ctx.option_float("nccl_ras_min_interval", DEFAULT_MIN_INTERVAL)
        self.training_dir = Path(ctx.option_str("training_directory", contract.TRAINING_DIR_DEFAULT) or "")
        self._last: dict[Target, _Last] = {}
        self._running: dict[Target, threading.Thread] = {}

    def deadline(self, default: float) -> float:
        return min(default, self.timeout + 1.0)

    # ------------------------------------------------------------------ which jobs
    def targets(self) -> list[Target]:
        found = self.static or self._discover()
        if len(found) > MAX_JOBS:
            self.skip("discovery", f"{len(found)} jobs to ask; only the first {MAX_JOBS} are asked")
        return found[:MAX_JOBS]

    def _discover(self) -> list[Target]:
        """Jobs whose rank 0 runs here and said where its RAS listens (its rank file's header)."""
        try:
            files = sorted(self.training_dir.glob("*-rank0.prom"))[:MAX_DISCOVERY_FILES]
        except OSError:
            return []
        out: dict[str, Target] = {}
        now = time.time()
        for path in files:
            try:
                if now - path.lstat().st_mtime > DISCOVERY_TTL:
                    continue
                text = safe_read.read_bytes(path, 1 << 20).decode("utf-8", errors="replace")
            except OSError:
                continue  # the training collector counts unreadable rank files
            head, _, body = text.partition("\n")
            fields = dict(t.partition("=")[::2] for t in head.split() if "=" in t)
            addr, job = fields.get(HEADER_FIELD), _JOB_ID.search(body)
            if not addr or job is None:
                continue
            try:
                host, port = parse_address(addr)
            except ValueError:
                self.skip("discovery", f"{path.name}: {HEADER_FIELD} is not host:port")
                continue
            if not is_loopback(host):
                # A rank file is written by the job: it must not point the exporter elsewhere.
                self.skip("discovery", f"{path.name}: RAS address {host[:60]!r} is not a loopback one")
                continue
            job_id = unescape_label_value(job.group(1))
            out.setdefault(job_id, Target(job_id, host, port))
        return list(out.values())

    # ------------------------------------------------------------------ asking
    def _ask(self, t: Target, results: dict[Target, RasSeries | RasQueryError]) -> None:
        try:
            fmt, text = query(t.host, t.port, self.timeout, self.max_bytes)
            try:
                reports, _notes = parse_reports(text, f"{t.host}:{t.port}")
            except (RasParseError, ValueError, RecursionError) as exc:
                raise RasQueryError("malformed", f"the {fmt} report does not parse: {exc}") from None
            status = [r for r in reports if r.format in ("json", "text")]
            if not status:
                raise RasQueryError("malformed", "no status report in the answer")
            results[t] = report_series(status[-1], self.max_comms)
        except RasQueryError as exc:
            results[t] = exc
        except Exception as exc:  # noqa: BLE001 - a report must never take the collector down
            results[t] = RasQueryError("malformed", f"{type(exc).__name__}: {exc}")

    def _query_all(self, targets: list[Target]) -> None:
        now = time.monotonic()
        results: dict[Target, RasSeries | RasQueryError] = {}
        threads: list[tuple[Target, threading.Thread]] = []
        for t in targets:
            last = self._last.get(t)
            if last is not None and now < next_ask(last, self.min_interval):
                continue
            running = self._running.get(t)
            if running is not None and running.is_alive():
                self.skip("still_running", f"job {t.job_id}: the last RAS query has not returned")
                self._last[t] = self._failed(last, now, "still_running")
                continue
            th = threading.Thread(target=self._ask, args=(t, results), name=f"nccl-ras-{t.port}", daemon=True)
            th.start()
            self._running[t] = th
            threads.append((t, th))
        end = now + self.timeout + 0.5
        for t, th in threads:
            th.join(max(0.0, end - time.monotonic()))
            got = results.get(t)
            if isinstance(got, RasSeries):
                self._last[t] = _Last(time.monotonic(), got)
                if got.cut:
                    self.skip("label_cut", f"job {t.job_id}: RAS report label values cut", got.cut)
            else:
                err = got if got is not None else RasQueryError("timeout", "RAS did not answer in time")
                self.skip(err.reason, f"job {t.job_id} RAS at {t.host}:{t.port}: {err}")
                self._last[t] = self._failed(self._last.get(t), time.monotonic(), err.reason)
        for t in [t for t in self._last if t not in targets]:
            del self._last[t]
        for t in [t for t, th in self._running.items() if t not in targets and not th.is_alive()]:
            del self._running[t]  # a job that is gone: its finished query is not kept

    @staticmethod
    def _failed(last: _Last | None, at: float, reason: str) -> _Last:
        slow = reason in SLOW_FAILURES
        before = last.slow_failures if last is not None and last.series is None else 0
        return _Last(at, None, before + 1 if slow else 0)

    # ------------------------------------------------------------------ series
    def collect(self) -> Iterable[MetricFamily]:
        targets = self.targets()
        self._query_all(targets)
        node = self.ctx.node_name
        fams: dict[contract.Metric, GaugeMetricFamily] = {}

        def fam(m: contract.Metric) -> GaugeMetricFamily:
            if m not in fams:
                labels = [self.ctx.node_label if k == contract.NODE_LABEL else k for k in m.labels]
                fams[m] = GaugeMetricFamily(m, m.help, labels=labels)
            return fams[m]

        up = fam(contract.NCCL_RAS_UP)
        for t in targets:
            job, _ = cap(t.job_id)
            last = self._last.get(t)
            series = last.series if last is not None else None
            up.add_metric([node, job], 0.0 if series is None else 1.0)
            if series is None:
                continue
            for metric, rows in series.rows.items():
                f = fam(metric)
                for labels, value in rows:
                    f.add_metric([node, job, *labels], value)
        return list(fams.values())
