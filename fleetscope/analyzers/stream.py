"""Streaming analysis: a long window in time chunks, memory bounded by the chunk, not the window.

Why. One-shot analysis holds the whole window on the grid (8 bytes a cell, and about 30 more in
features): a 512-node job over a day is hundreds of millions of cells. The detectors, though, look
back only minutes (rate windows, persistence, the hang look-back, the episode gap); what they need
from further back is small: each job's MFU baseline, and which findings are still open.

So :func:`analyze_chunked` cuts ``[start, end]`` into *own* regions of ``chunk_s`` on the one-shot
grid (same step, same phase), loads each with a *lead-in* of ``lead_s`` before it (the look-back),
and runs :func:`~fleetscope.analyzers.core.analyze` on it with the :class:`Carry` of the chunks
before. Findings are merged across chunks by their subject (kind, job, node, GPU, rank): a finding
that the chunk before left open, or that ended inside this chunk's lead-in, continues. A finding
left open whose subject the new chunk no longer holds at all (a lost GPU, a node that left) stays
open, as one-shot analysis would keep it; one whose subject the chunk shows without it ends at the
chunk's first grid time.

What the chunks carry (:class:`Carry`): the best MFU (or tokens/s) level each job has shown. A
chunk that opens below it is not a warm-up (the job ran at its level before) and the drop is
measured against it, as the one-shot baseline would be.

The goodput account and the checkpoint advice are computed once, over the whole window: each
chunk hands on its jobs' counters over its own grid times (:class:`~fleetscope.analyzers.job_trace.JobTrace`:
sums over the ranks, job-level gauges, which ranks are present, where a counter fell; the lead-in
gives the counters' increases their sample before), the carry joins them, and the account reads
them with the merged findings, as one-shot analysis reads the grid. A failure and its restart,
rework back to the failed run's resume point, a save or a stall across a boundary, the
node-hours of the whole window and the nodes that left are so seen whole. The node verdicts,
straggler scores and job summaries are those of the last chunk (the state at the end of the
window), with the merged findings.

``tests/analyzers/test_stream.py`` compares the merged findings with one-shot analysis on the
scenario corpus; docs/analyzers.md#streaming says where the two may differ.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from fleetscope import contract as c
from fleetscope.analyzers.carry import Carry
from fleetscope.analyzers.config import DEFAULT, DetectorConfig
from fleetscope.analyzers.core import analyze, job_summaries, node_verdicts, one_finding_per_incident
from fleetscope.analyzers.features import Features
from fleetscope.analyzers.findings import Finding
from fleetscope.analyzers.goodput import accounts_of
from fleetscope.analyzers.report import JobStateSpan, Report
from fleetscope.analyzers.signals.failure_causes import CAUSE_PRIORITY, base_cause
from fleetscope.analyzers.signals.window_signals import Signals
from fleetscope.errors import FleetscopeError, NoData
from fleetscope.times import parse_duration, rfc3339
from fleetscope.window.frames import Frames, say_skipped
from fleetscope.window.memory import release_freed

#: (first grid time, last grid time) -> the frames of that window on the one-shot grid.
ChunkLoader = Callable[[float, float], Frames]
Progress = Callable[[float], None]

#: A finding judged at the data's edge is withdrawn by a later chunk that does not find it again
#: only when that chunk saw at least this much before its onset (seconds: the persistence and the
#: rate window), enough to judge it (a node's presence: any of it, see ``_context``).
WITHDRAW_CONTEXT_S = 300.0
#: Default own region of one chunk (seconds).
DEFAULT_CHUNK_S = 3600.0
#: Default lead-in (seconds): past the longest look-back of the detectors (the hang look-back and
#: the episode gap, 10 minutes each, plus the rate window before them).
DEFAULT_LEAD_S = 900.0


#: Streamed windows of more chunks than this load the next chunk while one is analyzed (unless
#: --prefetch or --no-prefetch says otherwise).
PREFETCH_OVER_CHUNKS = 4
#: --chunk auto: windows longer than this are streamed, in chunks of AUTO_CHUNK_S.
AUTO_STREAM_OVER_S = 2 * 3600.0
AUTO_CHUNK_S = 3600.0


def chunk_seconds(arg: str, window_s: float | None) -> float | None:
    """The chunk length ``--chunk`` asks for over a window of ``window_s`` (None: unknown), None = one
    piece."""

    if arg == "off":
        return None
    if arg == "auto":
        return AUTO_CHUNK_S if window_s is not None and window_s > AUTO_STREAM_OVER_S else None
    seconds = parse_duration(arg)
    if seconds <= 0:
        raise FleetscopeError(f"--chunk {arg}: give a duration such as 1h, or auto, or off")
    return seconds


def plan_chunks(
    start: float, end: float, step: float, chunk_s: float, lead_s: float
) -> list[tuple[float, float, float]]:
    """(load start, own start, own end) of each chunk, all on the grid ``start + k * step``.

    Own regions tile the grid without overlap; the last one ends at the window's last grid time
    (a tail shorter than half a chunk is part of the chunk before it).
    """
    n = int(np.floor((end - start) / step + 1e-9)) + 1
    own = max(1, round(chunk_s / step))
    lead = max(0, round(lead_s / step))
    firsts = list(range(0, n, own))
    if len(firsts) > 1 and n - firsts[-1] < own / 2:  # a short tail joins the chunk before it
        firsts.pop()
    out = []
    for i, a in enumerate(firsts):
        b = (firsts[i + 1] if i + 1 < len(firsts) else n) - 1
        out.append((start + max(0, a - lead) * step, start + a * step, start + b * step))
    return out


#: Kinds of which one-shot analysis gives one finding per node unless it can name the GPU (the
#: detectors fold the rest into it): a node-wide finding and a GPU's on that node are one subject.
PER_NODE = ("failing_node", "straggler", "monitoring_gap", "membership_change")
#: Kinds whose findings stay open once found (failing_node: none of its signals clears without a
#: reset): a later chunk that no longer sees the cause does not end them, as one-shot analysis does not.
LATCHED = ("failing_node",)
#: Kinds of one finding per job.
PER_JOB = ("mfu_drop", "job_hang")


def subject(f: Finding) -> tuple:
    """What a finding is about, whatever its cause or numbers: the key chunks' findings merge on.

    Coarser than the finding's :func:`~fleetscope.analyzers.findings.identity` (which the service
    and the demo use between cycles) on purpose: a later chunk may name a sharper cause of the same
    incident, and a node-wide finding and one of a GPU on that node are one subject.
    """
    if f.kind == "failing_node" or (f.kind in PER_NODE and f.node is not None and f.gpu is None):
        return (f.kind, f.node)
    if f.kind in PER_JOB and f.job_id is not None:
        return (f.kind, f.job_id)
    return (f.kind, f.job_id, f.node, f.gpu, f.rank)


def _same_subject(a: Finding, b: Finding) -> bool:
    """Same :func:`subject`, or a node-wide finding and one of a GPU of that node."""
    if subject(a) == subject(b):
        return True
    return a.kind == b.kind and a.kind in PER_NODE and a.node == b.node and (a.gpu is None or b.gpu is None)


def analyze_chunked(
    load: ChunkLoader,
    start: float,
    end: float,
    step: float,
    config: DetectorConfig | None = None,
    *,
    chunk_s: float = DEFAULT_CHUNK_S,
    lead_s: float = DEFAULT_LEAD_S,
    progress: Progress | None = None,
    prefetch: bool | None = None,
) -> Report:
    """Analyze ``[start, end]`` chunk by chunk (module docstring); the grid is ``start + k * step``.

    ``prefetch``: load the next chunk on a second thread while this one is analyzed (the first
    loads on this one): on two cores loading and detection overlap, and two chunks are held at
    the peak instead of one. None: only over more than :data:`PREFETCH_OVER_CHUNKS` chunks, where
    the time saved is minutes (a 512-node day: 198 s -> 141 s); a window of a few hours keeps the
    memory of one chunk.

    A chunk that holds no data at all (:class:`~fleetscope.errors.NoData`: a window that starts
    before a young Prometheus' first sample) is skipped, and the chunks skipped are said once on
    stderr; only a window of which every chunk is empty is an error.
    """
    cfg = config or DEFAULT
    plan = plan_chunks(start, end, step, chunk_s, lead_s)
    if prefetch is None:
        prefetch = len(plan) > PREFETCH_OVER_CHUNKS
    carry = Carry()
    merged: list[Finding] = []
    states: dict[str, list[JobStateSpan]] = {}
    last: Report | None = None
    empty: list[tuple[int, float, float]] = []
    attempt = _SkipEmpty(load)
    with ThreadPoolExecutor(1, thread_name_prefix="fleetscope-prefetch") as ahead:
        nxt: Future[Frames | None] | None = None
        for k, (load_start, own_start, own_end) in enumerate(plan):
            if last is not None:
                last.signals = None  # the chunk before lets go of its grid and signals
                release_freed()  # and what it freed goes back before this one loads (memory.py)
            frames = nxt.result() if nxt is not None else attempt(load_start, own_end)
            nxt = None
            if prefetch and k + 1 < len(plan):  # the next chunk loads while this one is analyzed
                nxt = ahead.submit(attempt, plan[k + 1][0], plan[k + 1][2])
            if frames is None:
                empty.append((k, own_start, own_end))
                if progress:
                    progress((k + 1) / len(plan))
                continue
            release_freed()  # the load's own scratch, before the detectors' (memory.py)
            report = analyze(frames, cfg, carry=carry, own_start=own_start)
            merged = merge_findings(merged, report, own_start, load_start, cfg)
            states = add_states(states, report, own_start, step)
            if report.carry is not None:
                carry = carry.merge(report.carry)
            last = report
            del frames
            if progress:
                progress((k + 1) / len(plan))
    if last is None:
        raise NoData(
            f"no data between {rfc3339(start)} and {rfc3339(end)} (each of its {len(plan)} chunks is empty)"
        )
    if empty:
        say_skipped("chunks", empty, len(plan))
    return _whole(last, start, np.array(carry.grid), step, merged, carry, cfg, states)


def _whole(
    last: Report,
    start: float,
    times: np.ndarray,
    step: float,
    merged: list[Finding],
    carry: Carry,
    cfg: DetectorConfig,
    states: dict[str, list[JobStateSpan]],
) -> Report:
    """The window's report: the last chunk's state, with the merged findings, the goodput
    accounts of the whole window (on its grid ``times``) from the jobs' carried counters, and each
    job's states over every chunk."""
    merged = one_finding_per_incident(merged, cfg.hang_lookback_s)
    merged.sort(key=lambda f: (f.start, f.kind, f.node or "", f.gpu or ""))
    goodput = accounts_of(carry.traces, merged, times, step, carry.window_nodes, cfg)
    signals = last.signals
    jobs = last.jobs if signals is None else job_summaries(signals, merged)
    for job, summary in jobs.items():
        summary.states = states.get(job, summary.states)
    return dataclasses.replace(
        last,
        start=start,
        findings=merged,
        nodes=last.nodes if signals is None else node_verdicts(signals.features, merged),
        jobs=jobs,
        goodput=goodput,
        # the jobs' counters are spent (the account is made); the rest goes on to a next window
        next_carry=dataclasses.replace(carry, traces={}, grid=()),
        # one chunk (no lead-in): its signals cover the window, for the plots
        window_signals=signals if last.start == start else None,
    )


class _SkipEmpty:
    """A chunk loader that answers None for a chunk without any data."""

    def __init__(self, load: ChunkLoader) -> None:
        self.load = load

    def __call__(self, a: float, b: float) -> Frames | None:
        try:
            return self.load(a, b)
        except NoData:
            return None


def analyze_one_chunk(frames: Frames, config: DetectorConfig | None = None) -> Report:
    """A window analyzed in one piece: the streamed path with a single chunk, whose own region is
    the whole window and which has no lead-in (the findings are those of :func:`analyze`)."""
    chunk_s = frames.end - frames.start + frames.step
    return analyze_chunked(
        lambda a, b: frames,
        frames.start,
        frames.end,
        frames.step,
        config,
        chunk_s=chunk_s,
        lead_s=0.0,
        prefetch=False,
    )


def merge_findings(
    merged: list[Finding],
    report: Report,
    own_start: float,
    load_start: float,
    config: DetectorConfig = DEFAULT,
) -> list[Finding]:
    """The findings so far with one more chunk's (module docstring).

    * A finding of the chunk continues the earlier finding of the same :func:`subject` that is open
      or ended in this chunk's view (from ``load_start``).
    * An earlier finding still open at the end of the chunk before, that began in this chunk's view
      (:func:`_context` into it) and that the chunk does not find again, is withdrawn: it was judged at the
      edge of the data (a node absent to the end looked gone), and this chunk saw its onset with more data
      after it, as one-shot analysis would.
    * One that began before the view and is not found again ends at ``own_start`` when the chunk
      holds its subject, and stays open when it does not (a lost GPU stays lost) or is of a
      :data:`LATCHED` kind (a node found failing stays so, whether or not it came back).
    * The chunk's membership findings about a node that an earlier chunk found failing, and its
      hang of a job with a node found failing at most the hang look-back before it (to a rate window
      after), are that failure seen again (the detectors fold them so within one window; here the
      cause lies before the chunk's view). A hang long after a failure is a hang of its own.
    """
    feat = report.features
    present = _subjects_present(feat) if feat is not None else None
    live = [f for f in merged if f.end is None or f.end >= load_start]
    failing = [m for m in live if m.kind == "failing_node" and m.severity == "critical"]
    continued: set[int] = set()
    added: list[Finding] = []
    for f in report.findings:
        m = next((x for x in live if id(x) not in continued and _same_subject(x, f)), None)
        if m is None:
            if not _explained_before(f, failing, report.signals, config):
                added.append(f)
            continue
        continued.add(id(m))
        _continue(m, f, load_start)
    withdrawn = set()
    for m in live:
        if id(m) in continued:
            continue
        if m.end is None and m.start > load_start + _context(m):
            withdrawn.add(id(m))
        elif m.end is None and present is not None and _holds(present, m) and m.kind not in LATCHED:
            m.end = own_start
    return [m for m in merged if id(m) not in withdrawn] + added


def _continue(m: Finding, f: Finding, load_start: float) -> None:
    """``m`` (the chunks before) continued by ``f`` (this chunk, viewing from ``load_start``)."""
    # Where the diagnosis is read: a chunk that saw the onset, with the most data after it. When
    # this chunk saw it too, its place (GPU, rank) and cause stand; when the onset lies before its
    # view (a GPU lost an hour ago is only "missing" now), the earlier chunk's do.
    seen_onset = m.start >= load_start
    if seen_onset:
        m.node, m.gpu, m.rank, m.job_id = f.node, f.gpu, f.rank, f.job_id
    # A failing node is named after its most specific cause (failing_node.one_per_node), whichever
    # chunk saw it: a GPU seen lost stays lost when a later view only misses it.
    sf, sm = _specificity(f), _specificity(m)
    if sf < sm or (seen_onset and sf == sm):
        m.cause, m.action = f.cause, f.action
    m.start = min(m.start, f.start)
    m.end = f.end
    if _rank(f.severity) > _rank(m.severity):
        m.severity = f.severity
    if f.score is not None and (m.score is None or f.score > m.score):
        m.score = f.score
    # The evidence too: read where the onset was seen with the most data after it.
    m.evidence = {**m.evidence, **f.evidence} if seen_onset else {**f.evidence, **m.evidence}


def _context(f: Finding) -> float:
    """How much of a chunk's view before a finding's onset lets the chunk judge it: a node's
    presence needs one grid time of it, a level or a rate :data:`WITHDRAW_CONTEXT_S`."""
    return 0.0 if f.kind in ("membership_change", "monitoring_gap") else WITHDRAW_CONTEXT_S


def _specificity(f: Finding) -> int:
    """How specific a cause is (lower: more): a failing node's by its detector's order; "unknown" last."""
    if f.cause == "unknown":
        return len(CAUSE_PRIORITY) + 2
    if f.kind == "failing_node":
        base = base_cause(f.cause)
        return CAUSE_PRIORITY.index(base) if base in CAUSE_PRIORITY else len(CAUSE_PRIORITY) + 1
    return len(CAUSE_PRIORITY) + 1


def _explained_before(
    f: Finding, failing: list[Finding], signals: Signals | None, config: DetectorConfig
) -> bool:
    """Is ``f`` a failure found before (``failing``) seen again (:func:`merge_findings`)?"""
    if f.kind in ("membership_change", "monitoring_gap"):
        return f.node in {m.node for m in failing}
    if f.kind == "job_hang" and f.job_id is not None and signals is not None:
        nodes = signals.job_nodes(f.job_id)
        lo, hi = f.start - config.hang_lookback_s, f.start + config.rate_window_s
        causes = [m for m in failing if m.node in nodes and lo <= m.start <= hi]
        for m in causes:  # as the hang detector marks the failure it folds a hang into
            no_progress = f.evidence.get("no_progress")
            if no_progress is not None:
                m.evidence.setdefault("hang", no_progress)
        return bool(causes)
    return False


def _rank(severity: str) -> int:
    return {"info": 0, "warning": 1, "critical": 2}.get(severity, 0)


def _subjects_present(feat: Features) -> dict[str, set]:
    nodes = {str(n) for n in feat.gpus.keys[c.NODE_LABEL]} | {str(n) for n in feat.ranks.keys[c.NODE_LABEL]}
    gpus = {
        (str(n), str(g)) for n, g in zip(feat.gpus.keys[c.NODE_LABEL], feat.gpus.keys["gpu"], strict=True)
    }
    jobs = set(feat.jobs)
    return {"nodes": nodes, "gpus": gpus, "jobs": jobs}


def _holds(present: dict[str, set], f: Finding) -> bool:
    """Does the chunk hold the finding's subject (so that its absence of the finding means it ended)?"""
    if f.gpu is not None and f.node is not None:
        return (f.node, f.gpu) in present["gpus"]
    if f.node is not None:
        return f.node in present["nodes"]
    if f.job_id is not None:
        return f.job_id in present["jobs"]
    return True


def add_states(
    states: dict[str, list[JobStateSpan]], report: Report, own_start: float, step: float
) -> dict[str, list[JobStateSpan]]:
    """Each job's states so far, with a chunk's from ``own_start`` on (its lead-in is the chunk
    before's, except a stall or an absence that began there: the chunk before could not prove it
    yet, its last row (``own_start - step``) reading as the row before it until its scrape lands;
    and a stall the chunk before saw no end of, which this chunk's hindsight makes a pause)."""
    out = {job: list(spans) for job, spans in states.items()}
    for job, summary in report.jobs.items():
        spans = out.setdefault(job, [])
        for s in summary.states:
            if s.end is not None and s.end <= own_start:
                continue
            last = spans[-1] if spans else None
            if (
                s.state == "running"
                and s.start < own_start
                and last is not None
                and last.state == "stalled"
                and last.start >= s.start
                and (last.end is None or last.end >= own_start)
            ):
                # The stall the chunk before saw no end of was a pause in this chunk's hindsight
                # (a checkpoint or a restore that its pause time closed, signals/jobs.py): running.
                spans.pop()
                before = spans[-1] if spans else None
                if before is not None and before.state == "running" and before.end == last.start:
                    spans[-1] = JobStateSpan("running", before.start, s.end)
                else:
                    spans.append(JobStateSpan("running", last.start, s.end))
                continue
            start = max(s.start, own_start)
            proven_late = s.state in ("stalled", "down") and s.start < own_start
            if proven_late and spans and spans[-1].state == "running":
                start = max(s.start, spans[-1].start)
            elif own_start - step <= s.start < own_start and spans and spans[-1].start <= s.start:
                start = s.start  # the chunk before's last row, read as the row before it (hedged)
            if spans and spans[-1].state == s.state and (spans[-1].end is None or spans[-1].end >= start):
                spans[-1] = JobStateSpan(s.state, spans[-1].start, s.end)
                continue
            if spans and (spans[-1].end is None or spans[-1].end > start):
                spans[-1] = JobStateSpan(spans[-1].state, spans[-1].start, start)
            spans.append(JobStateSpan(s.state, start, s.end))
    return out
