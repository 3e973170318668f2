"""The live service's analysis of one cycle, and its typed result.

``LiveAnalysis(source, config, step, shard)(start, end)`` is the one function the service runs
every cycle (in its analysis child, :class:`~fleetscope.service.isolate.ProcessAnalyze`, which
holds it between cycles): it loads the window of its sliding
:class:`~fleetscope.window.sources.PrometheusSource` (only what is new), analyzes it in one piece
(:func:`~fleetscope.analyzers.stream.analyze_one_chunk`), and returns a :class:`LiveResult` built
whole: the report, the jobs' states and the served models read off the window's signals while they
still exist (:mod:`fleetscope.service.summaries`; the signals stay in the child), the shard's share
and what the source noticed.

With ``shard`` (``--shard K/N``), each cycle first finds the shard's share of the fleet
(:class:`~fleetscope.service.shard.Discovery`, :func:`~fleetscope.service.shard.share_of`) and
analyzes a source restricted to its nodes (:meth:`PrometheusSource.restrict`: a new source;
nothing of the one held is changed), then keeps of the result only what the shard reports (a split
job's slice is analyzed on several shards; each reports its nodes' verdicts, its owner the job's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fleetscope.analyzers.config import DetectorConfig
from fleetscope.analyzers.report import Report
from fleetscope.analyzers.stream import analyze_one_chunk
from fleetscope.errors import NoData
from fleetscope.service.shard import Discovery, Shard, Share, share_of
from fleetscope.service.summaries import job_states, served_models
from fleetscope.window.sources import PrometheusSource, Source


@dataclass(frozen=True)
class LiveResult:
    """One cycle's result: what the API, the page and ``/metrics`` serve until the next."""

    report: Report
    #: Job id -> its state at the window's end (:func:`~fleetscope.service.summaries.job_states`).
    jobs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: The served models, their replicas and SLO burn rates
    #: (:func:`~fleetscope.service.summaries.served_models`).
    models: Sequence[Mapping[str, Any]] = ()
    #: What this replica owned (:meth:`~fleetscope.service.shard.Share.summary`); None unsharded.
    shard: Mapping[str, int] | None = None
    #: Samples the sliding window found changed at the edge of its re-fetch margin (0: none).
    history_changed_cells: int = 0


def live_result(report: Report, share: Share | None = None, history_changed_cells: int = 0) -> LiveResult:
    """The result of ``report``: its jobs' states and served models from its signals (none when
    the report has let go of them, or has none: a shard that owned nothing). With ``share``, only
    what the shard reports (:meth:`Share.report <fleetscope.service.shard.Share.report>`): the
    states are read off the whole analysis first, then everything is cut to the share."""
    signals = report.signals
    jobs: Mapping[str, Any] = job_states(signals, report) if signals is not None else {}
    models: Sequence[Mapping[str, Any]] = served_models(signals) if signals is not None else []
    if share is not None:
        report = share.report(report)
        jobs, models = share.job_states(jobs), share.served_models(models)
    return LiveResult(
        report,
        jobs=jobs,
        models=models,
        shard=None if share is None else share.summary(),
        history_changed_cells=history_changed_cells,
    )


class LiveAnalysis:
    """``LiveAnalysis(source, config, step, shard)(start, end)``: one cycle (module docstring).

    Picklable, so the service's analysis child holds it, and with it the source's sliding window.
    """

    def __init__(
        self,
        source: PrometheusSource,
        config: DetectorConfig | None = None,
        step: float | None = None,
        shard: Shard | None = None,
    ) -> None:
        self.source, self.config, self.step, self.shard = source, config, step, shard
        refetch = source.refetch_s if source.refetch_s is not None else 120.0
        self.discovery = Discovery(refetch) if shard is not None else None

    def __call__(self, start: float, end: float) -> LiveResult:
        if self.shard is None or self.discovery is None:
            return self._analyze(self.source, start, end)
        rows = self.discovery.rows(self.source, start, end, self.step or 15.0)
        if not rows:
            raise NoData(f"{self.source.name} has no fleetscope series in the window")
        share = share_of(rows, self.shard, self.discovery.read)
        matcher = share.matcher()
        if matcher is not None:
            try:
                return self._analyze(self.source.restrict(matcher), start, end, share)
            except NoData:
                pass  # this share holds no sample in the window: nothing to report
        return live_result(Report(start=start, end=end), share)

    def _analyze(self, source: Source, start: float, end: float, share: Share | None = None) -> LiveResult:
        report = analyze_one_chunk(source.load(start, end, self.step), self.config)
        # history_changed_cells is said in every API answer's status block (and /readyz) while it holds.
        return live_result(report, share, source.history_changes())
