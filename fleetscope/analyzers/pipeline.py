"""Run every detector over loaded frames and fill the :class:`~fleetscope.analyzers.api.Analysis`."""

from __future__ import annotations

import warnings

import numpy as np

from fleetscope import contract as c
from fleetscope.analyzers.api import Analysis, JobSummary, NodeVerdict, StragglerScore
from fleetscope.analyzers.detectors import failing_node, mfu_drop, straggler
from fleetscope.analyzers.detectors.config import DEFAULT, DetectorConfig
from fleetscope.analyzers.features import Features, build_features
from fleetscope.analyzers.frames import Frames


def run_detectors(frames: Frames, config: DetectorConfig | None = None) -> tuple[Analysis, Features]:
    cfg = config if isinstance(config, DetectorConfig) else DEFAULT
    feat = build_features(frames, cfg)
    failing = failing_node.detect(feat)
    slow = straggler.detect(feat)
    drops = mfu_drop.detect(feat, failing + slow)
    findings = failing + slow + drops
    findings.sort(key=lambda f: (f.start, f.kind, f.node or "", f.gpu or ""))
    analysis = Analysis(start=frames.start, end=frames.end, findings=findings)
    analysis.nodes = _verdicts(feat, findings)
    analysis.straggler_scores = _scores(feat)
    analysis.jobs = _jobs(feat, analysis)
    return analysis, feat


def _verdicts(feat: Features, findings) -> dict[str, NodeVerdict]:
    nodes: dict[str, NodeVerdict] = {}
    gs = feat.gpus
    for node, gpu in zip(gs.keys[c.NODE_LABEL], gs.keys["gpu"], strict=True):
        nodes.setdefault(node, NodeVerdict(node=node)).gpus[str(gpu)] = "healthy"
    for node in feat.ranks.keys[c.NODE_LABEL] if len(feat.ranks.keys) else []:
        nodes.setdefault(node, NodeVerdict(node=node))
    rank = {"healthy": 0, "degraded": 1, "failing": 2}
    for f in findings:
        if f.node is None or f.kind == "mfu_drop" or f.end is not None:
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


def _scores(feat: Features) -> list[StragglerScore]:
    _per_step, ratio, _ = straggler.rank_scores(feat)
    out = []
    r = feat.ranks
    for k in range(ratio.shape[1]):
        col = ratio[:, k]
        ok = np.nonzero(np.isfinite(col))[0]
        if not ok.size or not r.present[-1, k]:
            continue
        row = r.keys.iloc[k]
        out.append(StragglerScore(job_id=str(row["job_id"]), rank=int(float(row["rank"])), node=str(row[c.NODE_LABEL]),
                                  gpu=str(row["gpu"]), score=round(float(col[ok[-1]]), 4)))  # fmt: skip
    out.sort(key=lambda s: (s.job_id, s.rank))
    return out


def _jobs(feat: Features, analysis: Analysis) -> dict[str, JobSummary]:
    jobs: dict[str, JobSummary] = {}
    r = feat.ranks
    for job in feat.jobs:
        cols = (r.keys["job_id"].to_numpy() == job) & r.present[-1]
        series, unit, _ = mfu_drop.job_mfu(feat, job)
        last = series[np.isfinite(series)]
        summary = JobSummary(job_id=job, ranks=int(cols.sum()),
                             nodes=sorted(set(r.keys[cols][c.NODE_LABEL])))  # fmt: skip
        if last.size:
            if unit == "MFU":
                summary.mfu = round(float(last[-1]), 4)
            else:
                summary.tokens_per_second = round(float(last[-1]), 1)
        jcols = r.keys["job_id"].to_numpy() == job
        w = feat.w
        tok = np.nansum(np.nan_to_num(r.tokens[-w:, jcols]))
        if tok > 0:
            summary.tokens_per_second = round(float(tok / (w * feat.step)), 1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            steps = np.nanmax(np.nansum(np.nan_to_num(r.steps[-w:, jcols]), axis=0)) if jcols.any() else 0
        if steps > 0:
            summary.step_seconds = round(float(w * feat.step / steps), 3)
        summary.stragglers = sorted({f.rank for f in analysis.findings
                                     if f.kind == "straggler" and f.job_id == job and f.rank is not None
                                     and f.end is None})  # fmt: skip
        jobs[job] = summary
    return jobs
