"""Hangs: every rank of a job stops progressing while its GPUs stay busy, and what caused it.

Reasoning (docs/design.md#hangs). A collective that never completes leaves every rank blocked in
NCCL while the GPUs report near-full utilisation (the NCCL kernels spin) until the watchdog aborts
the job (PyTorch's process-group timeout, 10 minutes by default). A planned pause looks different:
during evaluation or a blocking checkpoint the steps stop too, but the GPUs are neither saturated
nor is the pause unannounced (the job counts ``eval``/``checkpoint`` phase time), and a checkpoint
that is slow because the shared file system is saturated is slow on every node alike.

So a stall of a job (no rank steps for ``hang_s`` while its ranks still report) is a hang when the
job's GPUs stay busy through it (median utilisation at least ``hang_util``), or, without GPU data,
when it lasts ``hang_no_gpu_data_s``, and no pause phase counted time in it. Its root cause is the
node whose hardware spoke first, in the ``hang_lookback_s`` before the stall began up to one rate
window into it: an earlier failing-node finding (XID, lost GPU, ranks that vanished), EFA
retransmit timeouts or impaired/unresponsive-peer events, or a non-application XID. That node gets
a ``failing_node`` finding with the hang as evidence; with no hardware cause the job gets one
``job_hang`` finding that says what to collect.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence, Set

import numpy as np

from fleetscope import contract as c
from fleetscope import labels, xids
from fleetscope.analyzers.detectors.base import Detection, Detector
from fleetscope.analyzers.features import Features, fmt_time
from fleetscope.analyzers.findings import Finding
from fleetscope.analyzers.signals.ras import RasHang, RasRank
from fleetscope.analyzers.signals.window_signals import Signals
from fleetscope.window.frames import increase_steps

HANG_ACTION = (
    "collect where every rank waits before the watchdog kills the job: py-spy dump --pid of each "
    "rank, the NCCL flight recorder (TORCH_NCCL_TRACE_BUFFER_SIZE, TORCH_NCCL_DUMP_ON_TIMEOUT=1) and "
    "NCCL_DEBUG=INFO logs; then restart from the last checkpoint"
)
NETWORK_ACTION = (
    "drain the node and restart the job from the last checkpoint without it; check the EFA device "
    "(fi_info -p efa, hw_counters) and its cabling"
)
XID_ACTION = "drain the node and restart the job without it; reset the GPU and run dcgmi diag -r 3"

_EFA_EVENTS = (
    c.EFA_RETRANS_TIMEOUT_EVENTS,
    c.EFA_IMPAIRED_REMOTE_CONN_EVENTS,
    c.EFA_UNRESPONSIVE_REMOTE_EVENTS,
)


def _paused(signals: Signals, job: str, a: int, b: int) -> bool:
    """The job counted pause-phase time (evaluation, checkpoint) in [a, b]."""
    r = signals.features.ranks
    cols = signals.job_columns(job)
    return any(
        ph in r.phases and np.nansum(np.nan_to_num(r.phases[ph][a : b + 1, cols])) > 0
        for ph in c.PAUSE_PHASES
    )


def _computing(signals: Signals, job: str, nodes: Set[str], a: int, b: int) -> bool:
    """The job's GPUs do real work through [a, b]: their tensor pipes (or power) stay near training's.

    Utilisation counts a kernel that only polls as busy, so NCCL's spinning kernels read 100% while
    the tensor pipes idle and the power falls to a fraction of training's; an evaluation with big
    batches keeps both up. Without either series nothing can be told apart (False).
    """
    gs = signals.features.gpus
    cols = np.isin(gs.keys[c.NODE_LABEL].to_numpy().astype(str), list(nodes)) if len(gs.keys) else None
    if cols is None or not cols.any():
        return False
    train = signals.stepping(job).copy()
    train[a : b + 1] = False
    for x, share in ((gs.tensor, 0.5), (gs.power, 0.8)):
        v = x[:, cols]
        if not np.isfinite(v[a : b + 1]).any() or not np.isfinite(v[train]).any():
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            during, usual = float(np.nanmedian(v[a : b + 1])), float(np.nanmedian(v[train]))
        return usual > 0 and during >= share * usual
    return False


def _efa_first(feat: Features, nodes: Set[str], lo: int, hi: int) -> dict[str, tuple[int, str]]:
    """Node -> (first grid index, evidence) of EFA error events in [lo, hi]."""
    out: dict[str, tuple[int, str]] = {}
    for name in _EFA_EVENTS:
        f = feat.frames.get(name)
        if not len(f):
            continue
        inc = increase_steps(f.values)
        for j in range(len(f)):
            node = str(f.labels.iloc[j][c.NODE_LABEL])
            if node not in nodes:
                continue
            hit = np.nonzero(np.nan_to_num(inc[lo : hi + 1, j]) > 0)[0]
            if not hit.size:
                continue
            i = lo + int(hit[0])
            dev = str(f.labels.iloc[j].get("device", ""))
            count = float(np.nansum(inc[lo : hi + 1, j]))
            if node not in out or i < out[node][0]:
                out[node] = (
                    i,
                    f"{dev} {name.removeprefix('efa_')} +{count:g} from {fmt_time(feat.times[i])}",
                )
    return out


def _xid_first(feat: Features, nodes: Set[str], lo: int, hi: int) -> dict[tuple[str, str], tuple[int, int]]:
    """(node, gpu) -> (first grid index, XID) of a non-application XID counted in [lo, hi]."""
    out: dict[tuple[str, str], tuple[int, int]] = {}
    f = feat.frames.get(c.GPU_XID_ERRORS_TOTAL)
    if not len(f):
        return out
    inc = increase_steps(f.values)
    for j in range(len(f)):
        row = f.labels.iloc[j]
        node, gpu = str(row[c.NODE_LABEL]), str(row.get("gpu", ""))
        raw = row.get("xid")
        xid = labels.label_index(raw, labels.MAX_XID, "xid") if raw else -1  # no xid label: an unknown one
        if xid is None:
            continue
        if node not in nodes or xids.xid_class(xid) == "application":
            continue
        hit = np.nonzero(np.nan_to_num(inc[lo : hi + 1, j]) > 0)[0]
        if hit.size and ((node, gpu) not in out or lo + int(hit[0]) < out[(node, gpu)][0]):
            out[(node, gpu)] = (lo + int(hit[0]), xid)
    return out


def _vanished_first(feat: Features, nodes: Set[str], lo: int, hi: int) -> dict[tuple[str, str], int]:
    """(node, gpu) -> grid index where a GPU's series stopped in [lo, hi] while its node's others went on."""
    gs = feat.gpus
    out: dict[tuple[str, str], int] = {}
    if not gs.clock.size:
        return out
    have = ~np.isnan(gs.clock) | ~np.isnan(gs.util)
    node_of = gs.keys[c.NODE_LABEL].to_numpy().astype(str)
    T = have.shape[0]
    for j, (node, gpu) in enumerate(zip(node_of, gs.keys["gpu"].to_numpy().astype(str), strict=True)):
        if node not in nodes:
            continue
        for i in range(max(1, lo), min(hi, T - 3) + 1):
            if have[i - 1, j] and not have[i : i + 3, j].any():
                peers = (node_of == node) & (np.arange(len(node_of)) != j)
                if peers.any() and have[i : i + 3, peers].any():
                    out[(node, gpu)] = i
                break
    return out


def _root_cause(
    feat: Features, job: str, nodes: Set[str], lo: int, hi: int, a: int, stall_ev: dict[str, str]
) -> Finding | None:
    """The failing-node finding for the node whose hardware spoke first before the hang."""
    times = feat.times
    r = feat.ranks
    efa = _efa_first(feat, nodes, lo, hi)
    xid = _xid_first(feat, nodes, lo, hi)
    Candidate = tuple[int, str, str | None, str, str, dict[str, str]]
    candidates: list[Candidate] = []
    for node, (i, text) in efa.items():
        candidates.append((i, node, None, "network", NETWORK_ACTION, {"efa": text}))
    for (xnode, xgpu), (xi, code) in xid.items():
        candidates.append(
            (
                xi,
                xnode,
                xgpu,
                xids.finding_cause(code),
                xids.describe(code).action or XID_ACTION,
                {f"XID {code}": f"at {fmt_time(times[xi])} ({xids.xid_class(code)} class)"},
            )
        )
    for (vnode, vgpu), vi in _vanished_first(feat, nodes, lo, hi).items():
        candidates.append(
            (
                vi,
                vnode,
                vgpu,
                "gpu_missing",
                XID_ACTION,
                {
                    "series": f"GPU {vgpu}'s series stopped at {fmt_time(times[vi])} while the node's "
                    "other GPUs kept reporting"
                },
            )
        )
    if not candidates:
        return None
    i, node, first_gpu, cause, action, ev = min(candidates, key=lambda t: t[0])
    gpu = first_gpu
    rank = None
    if gpu is not None:
        cols = (r.keys[c.NODE_LABEL].to_numpy().astype(str) == node) & (
            r.keys["gpu"].to_numpy().astype(str) == gpu
        )
        if cols.any():
            rank = int(float(r.keys[cols].iloc[0]["rank"]))
    ev = {**ev, **stall_ev, "confirmed_at": fmt_time(times[max(a, i)])}
    return Finding(
        kind="failing_node",
        severity="critical",
        node=node,
        gpu=gpu,
        rank=rank,
        job_id=job,
        start=float(times[i]),
        cause=cause,
        evidence=ev,
        action=action,
    )


DEAD_ACTION = (
    "the rank's process died or froze (RAS gets no answer from it): check the node's kernel log, XIDs "
    "and the process; drain the node if its hardware failed, then restart the job without it"
)
NOT_LAUNCHED_ACTION = (
    "the named rank never launched the collective the others wait in (its host is stuck: data loader, "
    "I/O, the GIL, or its code path diverged): py-spy dump --pid that rank and read its Flight Recorder "
    "dump, then restart from the last checkpoint; the node is not at fault"
)


def _place(feat: Features, job: str, who: RasRank) -> tuple[str, str | None]:
    """(node, GPU) of a rank RAS names: from the job's telemetry (``training_info``), else as RAS
    gives them (its host may be an IP address)."""
    keys = feat.ranks.keys
    if who.rank is not None and len(keys):
        hit = keys[(keys["job_id"].astype(str) == job) & (keys["rank"].astype(str) == str(who.rank))]
        if len(hit):
            return str(hit.iloc[0][c.NODE_LABEL]), str(hit.iloc[0]["gpu"])
    return who.host, who.gpu or None


def _ras_evidence(feat: Features, job: str, h: RasHang) -> dict[str, str]:
    where = []
    for who in h.ranks[:8]:
        node, gpu = _place(feat, job, who)
        where.append(f"rank {who.rank} (node {node}, GPU {gpu})" if who.rank is not None else f"node {node}")
    ev = {"reason": h.reason}
    if where:
        ev["waiting_for"] = ", ".join(where) + (f" and {len(h.ranks) - 8} more" if len(h.ranks) > 8 else "")
    ev["nccl_ras"] = f"communicator {h.comm}: {h.detail}"
    ev["confirmed_at"] = fmt_time(feat.times[h.confirmed])
    return ev


def _end(signals: Signals, job: str, i: int) -> float | None:
    """When the job stepped again after grid index ``i`` (None: still hung at the window's end)."""
    moving = np.nonzero(signals.stepping(job)[i:])[0]
    return float(signals.features.times[i + int(moving[0])]) if moving.size else None


def _job_hang(feat: Features, job: str, h: RasHang, ev: dict[str, str], end: float | None) -> Finding:
    """A hang whose culprit is no node to drain: a rank that never launched the collective, or a
    dead rank RAS places on a host that is none of the job's nodes."""
    who = h.ranks[0] if h.ranks else None
    node, gpu = _place(feat, job, who) if who else (None, None)
    return Finding(
        kind="job_hang", severity="critical", node=None, gpu=gpu, rank=who.rank if who else None,
        job_id=job, start=float(feat.times[h.onset]), end=end, cause="hang",
        evidence={**ev, "culprit_node": node or "?"},
        action=NOT_LAUNCHED_ACTION if h.reason == "not_launched" else DEAD_ACTION,
    )  # fmt: skip


def _dead(
    feat: Features,
    job: str,
    h: RasHang,
    at: tuple[str, str | None],
    ev: dict[str, str],
    end: float | None,
    near: list[Finding],
    span: tuple[int, int],
) -> Finding | None:
    """A dead rank on one of the job's nodes: that node's failing_node finding (an earlier one
    carries the RAS evidence instead; the XID that killed the rank is the cause when there is one).
    ``at``: the rank's (node, GPU)."""
    node, gpu = at
    if near:
        for f in near:
            for k, v in ev.items():
                f.evidence.setdefault(k, v)
        return None
    cause = _root_cause(feat, job, frozenset({node}), span[0], span[1], h.onset, {})
    if cause is not None:
        cause.evidence.update(ev)
        cause.end = end
        return cause
    return Finding(
        kind="failing_node", severity="critical", node=node, gpu=gpu, rank=h.ranks[0].rank, job_id=job,
        start=float(feat.times[h.onset]), end=end, cause="rank_dead", evidence=ev, action=DEAD_ACTION,
    )  # fmt: skip


def _ras_findings(signals: Signals, job: str, prior: Sequence[Finding]) -> list[Finding]:
    """One finding per hang NCCL RAS shows for ``job``, at most ``ras_confirm_s`` plus a cycle after
    its onset: a dead rank's node (failing_node), a rank that never launched the collective (job_hang:
    software, nothing to drain), every rank launched and none completed with hardware evidence (that
    node's failing_node); without hardware evidence the last is left to the stall rule."""
    feat = signals.features
    times = feat.times
    look = max(1, round(feat.config.hang_lookback_s / feat.step))
    nodes = signals.job_nodes(job)
    out: list[Finding] = []
    order = {"dead": 0, "not_launched": 1, "launched_not_completed": 2}
    for h in sorted(signals.ras_hangs(job), key=lambda h: (order.get(h.reason, 3), h.confirmed)):
        lo, hi = max(0, h.onset - look), min(len(times) - 1, h.confirmed + feat.rate_window_steps)
        ev = _ras_evidence(feat, job, h)
        end = _end(signals, job, h.confirmed)
        failing = [f for f in [*prior, *out] if f.kind == "failing_node" and f.node in nodes
                   and times[lo] <= f.start <= times[hi]]  # fmt: skip
        dead_at = _place(feat, job, h.ranks[0]) if h.reason == "dead" else None
        if h.reason == "not_launched" or (dead_at is not None and dead_at[0] not in nodes):
            out.append(_job_hang(feat, job, h, ev, end))
        elif dead_at is not None:
            near = [f for f in failing if f.node == dead_at[0]]
            found = _dead(feat, job, h, dead_at, ev, end, near, (lo, hi))
            out.extend([found] if found is not None else [])
        elif failing:  # a dead rank or a failing node explains why nothing completes
            for f in failing:
                f.evidence.setdefault("reason", h.reason)
                f.evidence.setdefault("nccl_ras", ev["nccl_ras"])
        elif not _pause_like(signals, job, nodes, h):
            cause = _root_cause(feat, job, nodes, lo, hi, h.onset, {})
            if cause is not None:  # launched everywhere, completed nowhere, and the hardware spoke
                cause.evidence.update(ev)
                cause.end = end
                out.append(cause)
    return out


def _pause_like(signals: Signals, job: str, nodes: frozenset[str], h: RasHang) -> bool:
    """Equal frozen counts with idle GPUs or counted pause time: a pause, not a spin."""
    util = signals.gpu_busy(nodes, h.onset, h.confirmed)
    low = util is not None and util < signals.features.config.hang_util
    return low or _paused(signals, job, h.onset, h.confirmed)


class HangDetector(Detector):
    """Jobs that stopped progressing with their GPUs spinning: see the module docstring."""

    name = "hang"
    kinds = ("failing_node", "job_hang")

    def detect(self, signals: Signals, prior: Sequence[Finding]) -> Detection:
        """One finding per hang: the failing node that caused it, or the job when nothing did."""
        feat = signals.features
        cfg = feat.config
        times = feat.times
        out: list[Finding] = []
        look = max(1, round(cfg.hang_lookback_s / feat.step))
        for job in feat.jobs:
            nodes = signals.job_nodes(job)
            ras = _ras_findings(signals, job, prior)
            out.extend(ras)
            for a, b in signals.job_stalls(job, min_s=cfg.hang_s):
                if any(times[max(0, a - look)] <= f.start <= times[b] for f in ras):
                    continue  # RAS named this hang already
                util = signals.gpu_busy(nodes, a, b)
                if _paused(signals, job, a, b):
                    continue
                if util is None and (b - a + 1) * feat.step < cfg.hang_no_gpu_data_s:
                    continue
                if util is not None and util < cfg.hang_util:
                    continue  # GPUs idle or half busy: a pause (evaluation, checkpoint), not a spin
                if _computing(signals, job, nodes, a, b):
                    continue  # busy with real math (an evaluation with big batches), not spinning
                t0 = float(times[a])
                # The stall runs to the end, or to the row before a last one with no sample yet (a
                # last row that steps: the job resumed, as its state says).
                ongoing = b == len(times) - 1 or (b == len(times) - 2 and not signals.stepping(job)[-1])
                stall_ev = {
                    "no_progress": f"no rank of job {job} stepped from {fmt_time(t0)} for "
                    f"{(b - a + 1) * feat.step / 60:.0f} min{' (ongoing)' if ongoing else ''}",
                }
                if util is not None:
                    stall_ev[c.DCGM_FI_DEV_GPU_UTIL] = f"{util:.0f}% (collectives spinning)"
                lo, hi = max(0, a - look), min(len(times) - 1, a + feat.rate_window_steps)
                explained = [
                    f
                    for f in prior
                    if f.kind == "failing_node" and f.node in nodes and times[lo] <= f.start <= times[hi]
                ]
                if explained:
                    for f in explained:
                        f.evidence.setdefault("hang", stall_ev["no_progress"])
                    continue
                cause = _root_cause(feat, job, nodes, lo, hi, a, stall_ev)
                if cause is not None:
                    out.append(cause)
                    continue
                ev = dict(stall_ev)
                ev["confirmed_at"] = fmt_time(
                    times[min(a + max(1, round(cfg.hang_s / feat.step)) - 1, len(times) - 1)]
                )
                out.append(
                    Finding(
                        kind="job_hang",
                        severity="critical",
                        node=None,
                        job_id=job,
                        start=t0,
                        end=None if ongoing else float(times[b]),
                        cause="hang",
                        evidence=ev,
                        action=HANG_ACTION,
                    )
                )
        return Detection(out)
