"""The analyzer core: one window of frames in, one :class:`~fleetscope.analyzers.report.Report` out.

Everything that analyzes goes through :func:`analyze`: ``fleetscope analyze`` (text, JSON and HTML),
the live service's cycles, ``fleetscope plan`` and ``fleetscope evaluate``, each through
:func:`~fleetscope.analyzers.analyze_source.analyze_source` of the source
:func:`~fleetscope.window.sources.open_source` picks (so each streams a long window).

Flow: the loaders put every series of :data:`~fleetscope.analyzers.features.METRICS_USED` on one time
grid (:class:`~fleetscope.window.frames.Frames`); :func:`~fleetscope.analyzers.features.build_features`
aligns them per GPU and per rank once; :class:`~fleetscope.analyzers.signals.window_signals.Signals`
derives the shared signals from them, each on first read; each detector of
:data:`~fleetscope.analyzers.detectors.DETECTORS` reads the signals and returns its findings (seeing
the findings of the detectors before it) and what it learnt for the next chunk; then node verdicts,
straggler scores and job summaries are read off the findings and the signals.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import numpy as np

from fleetscope import contract as c
from fleetscope.analyzers.carry import Carry
from fleetscope.analyzers.config import DEFAULT, DetectorConfig
from fleetscope.analyzers.detectors import DETECTORS
from fleetscope.analyzers.features import METRICS_USED, Features, build_features
from fleetscope.analyzers.findings import Finding
from fleetscope.analyzers.goodput import GOODPUT_METRICS, goodput_accounts, job_traces, window_nodes
from fleetscope.analyzers.report import JobStateSpan, JobSummary, NodeVerdict, Report, StragglerScore
from fleetscope.analyzers.signals.window_signals import Signals
from fleetscope.times import rfc3339
from fleetscope.window.frames import Frames

Progress = Callable[[float], None]
#: What the loaders fetch: the detectors' series and the goodput account's.
LOADED: tuple[str, ...] = METRICS_USED + tuple(m for m in GOODPUT_METRICS if m not in METRICS_USED)


def analyze(
    frames: Frames,
    config: DetectorConfig | None = None,
    *,
    carry: Carry | None = None,
    own_start: float | None = None,
) -> Report:
    """Run every detector over ``frames`` and read the verdicts off their findings (``None``: defaults).

    ``carry`` and ``own_start`` are for one chunk of a streamed window (:mod:`fleetscope.analyzers.stream`):
    what the chunks before learnt, and where this chunk's own region begins after its lead-in. A
    chunk's report has no goodput account: its jobs' counters over its own region go on in
    ``report.carry`` (what this chunk hands on), and the account is computed once over the whole
    window (:func:`fleetscope.analyzers.stream.analyze_chunked`).
    """
    cfg = config or DEFAULT
    feat = build_features(frames, cfg, carry)
    signals = Signals(feat)
    findings: list[Finding] = []
    learnt = Carry()
    for detector in DETECTORS:
        found = detector.detect(signals, findings)
        findings += found.findings
        learnt = learnt.merge(found.learnt)
    findings = one_finding_per_incident(findings, cfg.hang_lookback_s)
    findings.sort(key=lambda f: (f.start, f.kind, f.node or "", f.gpu or ""))
    if own_start is None:
        goodput = goodput_accounts(signals, findings)
    else:  # a chunk: its jobs' counters go on to the account of the whole window (stream.py)
        goodput = {}
        learnt.traces = job_traces(signals, own_start, carry.traces if carry is not None else None)
        learnt.window_nodes = window_nodes(feat)
        learnt.grid = tuple(feat.times[int(np.searchsorted(feat.times, own_start - 1e-6)) :].tolist())
    return Report(
        start=frames.start,
        end=frames.end,
        findings=findings,
        nodes=node_verdicts(feat, findings),
        straggler_scores=_scores(signals),
        jobs=job_summaries(signals, findings),
        goodput=goodput,
        window_signals=signals,
        next_carry=learnt,
    )


def one_finding_per_incident(findings: list[Finding], lookback_s: float) -> list[Finding]:
    """A node that slowed the job and then failed is one incident: keep the failing-node finding.

    Its slowness (a straggler finding on the same node that ends at most ``lookback_s`` before
    the failure, or overlaps it) becomes evidence of the failure: when it began and why.
    """
    failing = [f for f in findings if f.kind == "failing_node" and f.severity == "critical"]
    if not failing:
        return findings
    out = []
    for f in findings:
        cause = next(
            (
                x
                for x in failing
                if f.kind == "straggler"
                and f.node == x.node
                and f.start <= x.start + lookback_s
                and (f.end is None or f.end >= x.start - lookback_s)
            ),
            None,
        )
        if cause is None:
            out.append(f)
            continue
        cause.evidence.setdefault("slow_before", f"straggler ({f.cause}) since {rfc3339(f.start)}")
    return out


def node_verdicts(feat: Features, findings: Sequence[Finding]) -> dict[str, NodeVerdict]:
    nodes: dict[str, NodeVerdict] = {}
    gs = feat.gpus
    for node, gpu in zip(gs.keys[c.NODE_LABEL], gs.keys["gpu"], strict=True):
        nodes.setdefault(node, NodeVerdict(node=node)).gpus[str(gpu)] = "healthy"
    for node in feat.ranks.keys[c.NODE_LABEL] if len(feat.ranks.keys) else []:
        nodes.setdefault(node, NodeVerdict(node=node))
    rank = {"healthy": 0, "degraded": 1, "failing": 2}
    for f in findings:
        if f.node is None or f.kind == "mfu_drop" or f.severity == "info" or f.end is not None:
            continue
        state = "failing" if f.kind == "failing_node" and f.severity == "critical" else "degraded"
        v = nodes.setdefault(f.node, NodeVerdict(node=f.node))
        if rank[state] > rank[v.state]:
            v.state = state
        where = f" gpu {f.gpu}" if f.gpu is not None else ""
        v.reasons.append(f"{f.kind}: {f.cause}{where}")
        if f.gpu is not None and rank[state] > rank.get(v.gpus.get(f.gpu, "healthy"), 0):
            v.gpus[f.gpu] = state
    for v in nodes.values():
        v.gpus = dict(sorted(v.gpus.items(), key=lambda kv: (len(kv[0]), kv[0])))
    return dict(sorted(nodes.items()))


def _scores(signals: Signals) -> list[StragglerScore]:
    feat = signals.features
    _per_step, ratio, _ = signals.rank_scores
    out: list[StragglerScore] = []
    r = feat.ranks
    if not ratio.shape[1]:
        return out
    jobs, ranks, nodes, gpus = (
        r.keys[k].to_numpy(dtype=object) for k in ("job_id", "rank", c.NODE_LABEL, "gpu")
    )
    for k in range(ratio.shape[1]):
        col = ratio[:, k]
        ok = np.nonzero(np.isfinite(col))[0]
        if not ok.size or not r.present[-1, k]:
            continue
        out.append(
            StragglerScore(
                job_id=str(jobs[k]),
                rank=int(float(ranks[k])),
                node=str(nodes[k]),
                gpu=str(gpus[k]),
                score=round(float(col[ok[-1]]), 4),
            )
        )
    out.sort(key=lambda s: (s.job_id, s.rank))
    return out


def job_summaries(signals: Signals, findings: Sequence[Finding]) -> dict[str, JobSummary]:
    feat = signals.features
    jobs: dict[str, JobSummary] = {}
    r = feat.ranks
    for job in feat.jobs:
        cols = (r.keys["job_id"].to_numpy() == job) & r.present[-1]
        series, unit, _ = signals.job_mfu(job)
        last = series[np.isfinite(series)]
        summary = JobSummary(job_id=job, ranks=int(cols.sum()), nodes=sorted(set(r.keys[cols][c.NODE_LABEL])))
        if last.size:
            if unit == "MFU":
                summary.mfu = round(float(last[-1]), 4)
            else:
                summary.tokens_per_second = round(float(last[-1]), 1)
        jcols = r.keys["job_id"].to_numpy() == job
        w = feat.rate_window_steps
        tok = np.nansum(np.nan_to_num(r.tokens[-w:, jcols]))
        if tok > 0:
            summary.tokens_per_second = round(float(tok / (w * feat.step)), 1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            steps = np.nanmax(np.nansum(np.nan_to_num(r.steps[-w:, jcols]), axis=0)) if jcols.any() else 0
        if steps > 0:
            summary.step_seconds = round(float(w * feat.step / steps), 3)
        _job_states(signals, job, summary)
        summary.stragglers = sorted(
            {
                f.rank
                for f in findings
                if f.kind == "straggler" and f.job_id == job and f.rank is not None and f.end is None
            }
        )
        jobs[job] = summary
    return jobs


def _job_states(signals: Signals, job: str, summary: JobSummary) -> None:
    """The job's state at the window's end and over it, from the one account the page reads too."""
    times = signals.features.times
    states = signals.job_states(job)
    spans = states.spans()
    summary.states = [
        JobStateSpan(name, float(times[first]), float(times[spans[k + 1][1]]) if k + 1 < len(spans) else None)
        for k, (name, first, _) in enumerate(spans)
    ]
    if spans:
        state = states.state()
        summary.state = "down" if state == "unknown" else state
        began = states.began()
        summary.since = float(times[began]) if began is not None else None
