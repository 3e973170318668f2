"""``/metrics`` of the live service: the verdict series of the metric contract.

Rendered from one snapshot of the store by a custom collector on a private registry (no process or
platform collectors, no global state), so every scrape shows exactly one analysis cycle; the app
caches the text per analysis and freshness state.
Verdicts stay exported while stale; ``fleetscope_service_verdicts_stale`` and
``fleetscope_service_last_analysis_timestamp_seconds`` say how old they are, so rules can tell.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from fleetscope import contract
from fleetscope.service.state import VerdictSnapshot


def _family(metric: contract.Metric, labels: tuple[str, ...] | None = None) -> GaugeMetricFamily:
    return GaugeMetricFamily(
        metric.name, metric.help, labels=list(metric.labels if labels is None else labels)
    )


def verdict_families(snap: VerdictSnapshot) -> Iterator[Metric]:
    analysis = snap.analysis

    success = _family(contract.SERVICE_ANALYSIS_SUCCESS)
    if snap.attempted_at is not None:
        success.add_metric([], 0.0 if snap.error else 1.0)
    yield success
    last = _family(contract.SERVICE_LAST_ANALYSIS)
    if snap.analyzed_at is not None:
        last.add_metric([], snap.analyzed_at)
    yield last
    duration = _family(contract.SERVICE_ANALYSIS_DURATION)
    if snap.duration is not None:
        duration.add_metric([], snap.duration)
    yield duration
    stale = _family(contract.SERVICE_VERDICTS_STALE)
    stale.add_metric([], 1.0 if snap.stale else 0.0)
    yield stale

    health = _family(contract.NODE_HEALTH)
    scores = _family(contract.STRAGGLER_SCORE)
    findings = _family(contract.FINDINGS)
    if analysis is not None:
        for name in sorted(analysis.nodes):
            state = analysis.nodes[name].state
            for s in contract.NODE_STATES:
                health.add_metric([name, s], 1.0 if s == state else 0.0)
        for sc in analysis.straggler_scores:
            scores.add_metric([sc.job_id, str(sc.rank), sc.node, str(sc.gpu)], float(sc.score))
        # Every kind x severity of the contract is present (0 when none), so rules can compare to 0.
        open_counts = Counter((f.kind, f.severity) for f in analysis.findings if f.end is None)
        kinds = sorted(set(contract.FINDING_KINDS) | {k for k, _ in open_counts})
        severities = sorted(set(contract.SEVERITIES) | {s for _, s in open_counts})
        for kind in kinds:
            for severity in severities:
                findings.add_metric([kind, severity], float(open_counts.get((kind, severity), 0)))
    yield health
    yield scores
    yield findings


class _SnapshotCollector(Collector):
    def __init__(self, snap: VerdictSnapshot) -> None:
        self.snap = snap

    def collect(self) -> Iterator[Metric]:
        yield from verdict_families(self.snap)


def render_snapshot(snap: VerdictSnapshot) -> bytes:
    """The text exposition of one snapshot (the app caches it per analysis and freshness state)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_SnapshotCollector(snap))
    return generate_latest(registry)
