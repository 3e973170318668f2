"""Join a hang analysis to what fleetscope knows of the job's nodes (docs/hang.md#hardware).

The one module where ``fleetscope hang`` and ``analyze --flight-recorder/--nccl-ras`` read
series: through :func:`fleetscope.window.sources.open_source` (``--prometheus`` or ``--input``),
the window's ``training_info`` maps each culprit rank to its node and GPU, and the node's
hardware counters in the window (XID, EFA timeouts and unresponsive peers, thermal throttling)
become evidence on that rank's hang.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from fleetscope import contract as c
from fleetscope.errors import FleetscopeError
from fleetscope.hang.model import HangResult
from fleetscope.times import rfc3339
from fleetscope.window.frames import Frames

if TYPE_CHECKING:
    from fleetscope.window.prometheus import PrometheusAccess

#: The series the join reads.
XID_COUNTER = c.GPU_XID_ERRORS_TOTAL.name
XID_GAUGE = c.DCGM_FI_DEV_XID_ERRORS.name
THERMAL = c.DCGM_FI_DEV_THERMAL_VIOLATION.name
EFA_EVENTS = (
    c.EFA_RETRANS_TIMEOUT_EVENTS.name,
    c.EFA_UNRESPONSIVE_REMOTE_EVENTS.name,
    c.EFA_IMPAIRED_REMOTE_CONN_EVENTS.name,
)
HANG_METRICS: tuple[str, ...] = (c.TRAINING_INFO.name, XID_COUNTER, XID_GAUGE, THERMAL, *EFA_EVENTS)


@dataclass(frozen=True)
class Place:
    node: str
    gpu: str


def rank_places(frames: Frames, job: str | None) -> tuple[dict[int, Place], str | None]:
    """Rank -> (node, GPU) from ``training_info`` of ``job`` (None: the window's only job), and a
    note when it cannot be decided."""
    info = frames.get(c.TRAINING_INFO.name)
    if not len(info):
        return {}, "training_info is not in the window: ranks are not mapped to nodes"
    jobs = sorted({j for j in info.column("job_id") if j})
    if job is None:
        if len(jobs) > 1:
            return {}, f"the window holds {len(jobs)} jobs ({', '.join(jobs[:5])}): give --job to map ranks"
        job = jobs[0] if jobs else ""
    sel = info.select(job_id=job)
    if not len(sel):
        return {}, f"job {job!r} has no training_info in the window (jobs: {', '.join(jobs[:5])})"
    out: dict[int, Place] = {}
    for rank, node, gpu in zip(sel.column("rank"), sel.column(c.NODE_LABEL), sel.column("gpu"), strict=True):
        try:
            out[int(rank)] = Place(str(node), str(gpu))
        except ValueError:
            continue
    return out, None


def _first_rise(times: np.ndarray, values: np.ndarray) -> float | None:
    """The first grid time a counter rose in the window (a reset counts as a rise)."""
    ok = ~np.isnan(values)
    if ok.sum() < 2:
        return None
    t, v = times[ok], values[ok]
    rose = np.flatnonzero(np.diff(v) != 0)
    return float(t[rose[0] + 1]) if len(rose) else None


def hardware_evidence(frames: Frames, node: str, gpu: str | None) -> list[tuple[float, str]]:
    """(time, line) of each hardware event of the node (and GPU) in the window."""
    out: list[tuple[float, str]] = []
    gpu_match = {c.NODE_LABEL: node} | ({"gpu": gpu} if gpu is not None else {})
    xid = frames.get(XID_COUNTER).select(**gpu_match)
    for i, code in enumerate(xid.column("xid")):
        t = _first_rise(frames.times, xid.values[:, i])
        if t is not None:
            out.append((t, f"XID {code} on node {node} GPU {xid.column('gpu')[i]}"))
    gauge = frames.get(XID_GAUGE).select(**gpu_match)
    for i in range(len(gauge)):
        t = _first_rise(frames.times, gauge.values[:, i])
        if t is not None:
            col = gauge.values[:, i]
            last = col[~np.isnan(col)][-1]
            out.append((t, f"XID {int(last)} (DCGM) on node {node} GPU {gauge.column('gpu')[i]}"))
    thermal = frames.get(THERMAL).select(**gpu_match)
    for i in range(len(thermal)):
        t = _first_rise(frames.times, thermal.values[:, i])
        if t is not None:
            out.append((t, f"thermal throttling on node {node} GPU {thermal.column('gpu')[i]}"))
    for name in EFA_EVENTS:
        efa = frames.get(name).select(**{c.NODE_LABEL: node})
        for i in range(len(efa)):
            t = _first_rise(frames.times, efa.values[:, i])
            if t is not None:
                out.append((t, f"{name} rose on node {node} device {efa.column('device')[i]}"))
    return sorted(out)


def join(result: HangResult, frames: Frames, job: str | None) -> None:
    """Give each culprit rank its node and GPU and attach its node's hardware evidence."""
    places, note = rank_places(frames, job)
    if note:
        result.notes.append(note)
    joined = 0
    for h in result.hangs:
        for r in h.waiting_for:
            place = places.get(r.rank) if r.rank is not None else None
            if place is not None:
                r.host, r.gpu = place.node, place.gpu
            if not r.host:
                continue
            events = hardware_evidence(frames, r.host, r.gpu)
            for t, line in events[:5]:
                when = rfc3339(t)
                lead = ""
                if h.since is not None and math.isfinite(h.since):
                    d = h.since - t
                    lead = f" ({abs(d):.0f} s {'before' if d >= 0 else 'after'} the hang began)"
                verb = {"launched_not_completed": "never completed", "not_launched": "never launched"}.get(
                    h.reason, "blocks"
                )
                seq = "" if h.seq is None else f" #{h.seq}"
                h.evidence.insert(0, f"{r.where()} {verb} {h.op}{seq}; {line} at {when}{lead}")
                joined += 1
    result.inputs["hardware"] = {
        "source": frames.source,
        "window": [rfc3339(frames.start), rfc3339(frames.end)],
        "ranks_mapped": len(places),
        "events_attached": joined,
    }


def load_and_join(
    result: HangResult,
    input: str | None,
    access: PrometheusAccess | None,
    job: str | None,
    start: float | None,
    end: float | None,
) -> None:
    """Open ``--input``/``--prometheus`` like analyze does, load the window, and :func:`join`."""
    from fleetscope.errors import NoData
    from fleetscope.window.sources import open_source

    source = open_source(input, access, HANG_METRICS)
    try:
        frames = source.load(start, end, None)
    except NoData:
        result.notes.append(f"{source.name}: no series in the window to join ranks to nodes")
        return
    except FleetscopeError as exc:
        result.notes.append(f"{source.name}: {exc}; ranks are not joined to nodes")
        return
    join(result, frames, job)


def hangs_for_analyze(
    paths: list[str],
    input: str | None,
    access: PrometheusAccess | None,
    job: str | None,
    start: float,
    end: float,
    confirm_s: float = 60.0,
) -> HangResult:
    """``analyze --flight-recorder DIR --nccl-ras FILE``: the hangs of those files, joined over
    the analysis window of the same source."""
    from fleetscope.hang.analysis import analyze_paths

    result = analyze_paths(paths, confirm_s)
    load_and_join(result, input, access, job, start, end)
    return result
