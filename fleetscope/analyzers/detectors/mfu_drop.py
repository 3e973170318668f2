"""MFU drops: a job's MFU (or tokens/s where FLOPs are unknown) below its own baseline, sustained.

Reasoning (docs/design.md#mfu-drops). MFU = model FLOPs per second / peak FLOP/s of the job's
GPUs (docs/design.md#mfu-and-peak-flops). Healthy H100 jobs sit at 35-45%, but each job has its own level, so
a job is compared with *itself*: the series is segmented offline by binary segmentation (the PELT/BinSeg
family, fit for a post-mortem) with a BIC-like penalty, the best long segment is the baseline, and every
segment at least ``mfu_drop`` (6%) below it for ``mfu_min_drop_s`` is a drop; the change points are reported.
Throughput is measured only while the job trains (``Signals.training``), so
checkpoints, evaluation, stalls and hangs never count as drops.

A drop is attributed to what co-occurs with it: a failing-node finding or a stall (no rank steps)
-> ``failing_node`` / ``stall``; a straggler finding -> ``straggler`` (or ``network`` for a network
one); else the phase shares of the step against the baseline segment: the data phase grew ->
``data_loading``; the collective (optimizer) phase grew -> ``network``; else ``unknown``. The shares
are of the training step only: checkpoint and evaluation time are pauses, masked from the series.

A drop that nothing explains must also move the job's *typical* step: the median over grid steps of
the work per second of step time (``training_step_seconds_total``). A slower GPU, link or data path
slows every step, so the median moves with the mean; a cluster of long host-side pauses (Python GC,
a logging flush) lengthens a few steps and leaves the median where it was, and a job of a few ranks
meets such clusters by chance (docs/design.md#mfu-drops).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fleetscope import contract as c
from fleetscope.analyzers.carry import Carry
from fleetscope.analyzers.detectors.base import Detection, Detector
from fleetscope.analyzers.features import Features, fmt_time
from fleetscope.analyzers.findings import Finding
from fleetscope.analyzers.signals.simultaneity import WORKLOAD_CAUSE
from fleetscope.analyzers.signals.window_signals import Signals
from fleetscope.window.frames import rolling_sum

_ACTIONS = {
    "straggler": "fix the straggler (see its finding): drain its node after the next checkpoint and restart "
    "the job without it",
    "failing_node": "restart the job without the failing node (see its finding)",
    "stall": "the job stopped stepping: check the rank logs for an NCCL timeout or a crashed rank",
    "data_loading": "check the data loader and the Lustre file system (FSx throughput, MDS load); "
    "raise data-loader workers or prefetch",
    "network": "check the EFA devices and fabric (retransmits, impaired connections); restart the job "
    "without the node whose link is degraded",
    "storage": "checkpoints take longer than usual: check the FSx for Lustre throughput and capacity",
    "unknown": "compare the step phase breakdown before and after the change point",
    WORKLOAD_CAUSE: "no hardware fault: the job's work is unevenly spread (MoE expert load, sequence "
    "lengths); tune the router's load balancing or the data packing",
}


def binary_segmentation(x: np.ndarray, min_size: int, penalty: float) -> list[int]:
    """Change points (indices where a new segment starts) of ``x`` under an L2 cost."""
    n = len(x)
    cs = np.concatenate([[0.0], np.cumsum(x)])
    cs2 = np.concatenate([[0.0], np.cumsum(x * x)])

    def cost(a: int, b: int) -> float:  # [a, b)
        s = cs[b] - cs[a]
        return (cs2[b] - cs2[a]) - s * s / (b - a)

    cps: list[int] = []
    stack = [(0, n)]
    while stack:
        a, b = stack.pop()
        if b - a < 2 * min_size:
            continue
        ks = np.arange(a + min_size, b - min_size + 1)
        sl = cs[ks] - cs[a]
        sr = cs[b] - cs[ks]
        cl = (cs2[ks] - cs2[a]) - sl * sl / (ks - a)
        cr = (cs2[b] - cs2[ks]) - sr * sr / (b - ks)
        total = cl + cr
        i = int(np.argmin(total))
        gain = cost(a, b) - total[i]
        if gain > penalty:
            k = int(ks[i])
            cps.append(k)
            stack += [(a, k), (k, b)]
    return sorted(cps)


def _noise(x: np.ndarray) -> float:
    d = np.diff(x)
    mad = np.median(np.abs(d - np.median(d))) if d.size else 0.0
    return float(1.4826 * mad / np.sqrt(2)) if mad > 0 else float(np.std(d) / np.sqrt(2) + 1e-12)


@dataclass
class _Levels:
    """A job's MFU (or tokens/s) segmented into levels: what the drop and the baseline are read from."""

    unit: str
    idx: np.ndarray  # grid indices of the valid values
    x: np.ndarray  # the valid values
    segs: list[tuple[int, int]]  # [a, b) into x
    means: list[float]
    base_i: int  # the baseline segment: the best long one
    stalls: list[tuple[int, int]]


def _levels(signals: Signals, job: str) -> _Levels | None:
    feat = signals.features
    cfg = feat.config
    series, unit, _paused = signals.job_mfu(job)
    idx = np.nonzero(np.isfinite(series))[0]
    if idx.size < 4:
        return None
    x = series[idx]
    scale = float(np.nanmedian(x)) or 1.0
    xn = x / scale
    sigma = max(_noise(xn), 0.004)
    min_size = max(2, round(cfg.mfu_min_drop_s / feat.step / 2))
    pen = cfg.changepoint_penalty * feat.rate_window_steps * sigma**2 * np.log(len(xn))
    cps = binary_segmentation(xn, min_size, pen)
    bounds = [0, *cps, len(xn)]
    segs = [(bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1)]
    means = [float(np.mean(x[a:b])) for a, b in segs]
    min_base = max(2, round(cfg.mfu_min_baseline_s / feat.step))
    long_segs = [i for i, (a, b) in enumerate(segs) if b - a >= min_base] or list(range(len(segs)))
    base_i = max(long_segs, key=lambda i: means[i])
    return _Levels(unit, idx, x, segs, means, base_i, signals.job_stalls(job))


def _drop(
    signals: Signals,
    job: str,
    unit: str,
    a: int,
    b: int,
    base: float,
    own_base: bool,
    lvl: float,
    segs,
    idx,
    base_i: int,
    stalls: list[tuple[int, int]],
    prior: Sequence[Finding],
) -> Finding | None:
    """The drop [a, b] from ``base`` (``own_base``: this chunk's best level, not one carried from
    earlier chunks), or None where a drop nothing explains is no drop."""
    feat = signals.features
    cfg = feat.config
    times = feat.times
    last = len(times) - 1
    t0, t1 = float(times[a]), float(times[b])
    margin = 2 * feat.rate_window_steps * feat.step
    cause = "unknown"
    ev: dict[str, str] = {}
    fmt = (lambda v: f"{v:.1%}") if unit == "MFU" else (lambda v: f"{v:,.0f}")
    ev[unit] = f"{fmt(base)} -> {fmt(lvl)} ({(lvl / base - 1):+.0%})"
    cp = [fmt_time(times[idx[s[0]]]) for s in segs[1:]]
    if cp:
        ev["change_points"] = ", ".join(cp)
    nodes = signals.job_nodes(job)
    ours = [f for f in prior if f.job_id == job or (f.job_id is None and f.node in nodes)]
    failing = [
        f
        for f in ours
        if f.kind == "failing_node" and f.severity == "critical" and t0 - margin <= f.start <= t1
    ]
    stalled = any(sa <= b and sb >= a for sa, sb in stalls)
    overlapping = [
        f for f in ours if f.kind == "straggler" and f.start <= t1 and (f.end is None or f.end >= t0)
    ]
    slow = [f for f in overlapping if f.severity != "info"]
    # Slowness that moved between replicas' roles (MoE routing, data) explains a drop as the job's own
    # work: reported as info, never blamed on the network (docs/design.md#simultaneity-is-structure).
    workload = [f for f in overlapping if f.cause == WORKLOAD_CAUSE]
    if failing:
        cause = "failing_node"
        ev["failing_node"] = ", ".join(sorted({f"{f.node} gpu {f.gpu} ({f.cause})" for f in failing}))
    elif stalled:
        cause = "stall"
    elif slow:
        net = [f for f in slow if f.cause == "network"]
        if len(net) == len(slow):
            cause = "network"
            ev["network"] = ", ".join(sorted({f.node or "" for f in net}))
        else:
            cause = "straggler"
            ev["straggler"] = ", ".join(
                sorted(
                    {
                        f"rank {f.rank} on {f.node} gpu {f.gpu} ({f.cause})"
                        for f in slow
                        if f.cause != "network"
                    }
                )
            )
    else:
        shares = _phase_shares(signals, job)
        if shares:
            ba, bb = idx[segs[base_i][0]], idx[segs[base_i][1] - 1]
            d = {ph: _mean_range(s, a, b) - _mean_range(s, ba, bb) for ph, s in shares.items()}
            for ph in ("data", "optimizer"):
                ev[f"{ph}_share_of_step"] = (
                    f"{_mean_range(shares[ph], ba, bb):.1%} -> {_mean_range(shares[ph], a, b):.1%}"
                )
            if d["data"] >= cfg.data_share_increase:
                cause = "data_loading"
                ev.update(_lustre_evidence(feat, a, b, ba, bb))
            elif d["optimizer"] >= cfg.comm_share_increase:
                cause = "network"
        if workload and cause in ("unknown", "network"):
            # The replicas wait for the hot role in their collectives, so the communication share
            # grows: that is the imbalance, not the network (no node's EFA counters say otherwise).
            cause = WORKLOAD_CAUSE
            ev[WORKLOAD_CAUSE] = workload[0].evidence.get("imbalance", "")
    # A baseline carried from earlier chunks of a streamed window has no steps here to compare with
    # (this chunk's best segment is inside the drop): the drop was measured from it there.
    if (
        cause in ("unknown", WORKLOAD_CAUSE)
        and own_base
        and not _typical_step_dropped(signals, job, unit, a, b, segs, idx, base_i)
    ):
        return None
    ev["confirmed_at"] = fmt_time(times[min(a + max(1, int(cfg.mfu_min_drop_s / feat.step)) - 1, last)])
    sev = "critical" if lvl <= base * 0.5 else "info" if cause == WORKLOAD_CAUSE else "warning"
    node, gpu = (
        _culprit(failing or slow) if cause in ("failing_node", "straggler", "network") else (None, None)
    )
    return Finding(
        kind="mfu_drop",
        severity=sev,
        node=node,
        gpu=gpu,
        job_id=job,
        start=t0,
        end=None if b >= last - 1 else t1,
        score=round(lvl / base, 3),
        cause=cause,
        evidence=ev,
        action=_ACTIONS[cause],
    )


def _typical_step_dropped(
    signals: Signals, job: str, unit: str, a: int, b: int, segs, idx, base_i: int
) -> bool:
    """The drop is in the typical step, or in the share of time spent stepping, by half the threshold.

    Throughput = (work per second of step time) x (step time per second of wall time). The first is
    read as the median over grid steps, so a few long steps do not move it; the second over the whole
    stretch (host work between steps, outside the step timer). True where the job reports no step
    time (nothing to confirm with).
    """
    feat = signals.features
    r = feat.ranks
    cols = signals.job_columns(job)
    work = r.flops if unit == "MFU" else r.tokens
    secs = np.nansum(np.nan_to_num(r.step_seconds[:, cols]), axis=1)
    done = np.nansum(np.nan_to_num(work[:, cols]), axis=1)
    ranks_s = r.present[:, cols].sum(axis=1) * feat.step
    train = signals.training(job)
    with np.errstate(all="ignore"):
        speed = np.where(train & (secs > 0) & (done > 0), done / secs, np.nan)
    in_drop = np.zeros(len(secs), dtype=bool)
    in_drop[a : b + 1] = True
    in_base = np.zeros(len(secs), dtype=bool)
    in_base[idx[segs[base_i][0]] : idx[segs[base_i][1] - 1] + 1] = True
    if min(np.isfinite(speed[in_drop]).sum(), np.isfinite(speed[in_base]).sum()) < 2:
        return True
    keep = 1 - feat.config.mfu_drop / 2
    if np.nanmedian(speed[in_drop]) <= np.nanmedian(speed[in_base]) * keep:
        return True

    def duty(where: np.ndarray) -> float:
        m = where & train
        return float(secs[m].sum() / ranks_s[m].sum()) if ranks_s[m].sum() > 0 else float("nan")

    return bool(duty(in_drop) <= duty(in_base) * keep)


def _explained(signals: Signals, job: str, a: int, b: int, prior: Sequence[Finding]) -> bool:
    """A straggler or failing-node finding of ``job`` overlaps grid times [a, b]."""
    times = signals.features.times
    t0, t1 = float(times[a]), float(times[b])
    nodes = signals.job_nodes(job)
    return any(
        f.kind in ("straggler", "failing_node")
        and f.severity != "info"
        and (f.job_id == job or (f.job_id is None and f.node in nodes))
        and f.start <= t1
        and (f.end is None or f.end >= t0)
        for f in prior
    )


def _culprit(causes: Sequence[Finding]) -> tuple[str | None, str | None]:
    """A job-level slowdown that one node causes is that node's: its name, and its GPU when one."""
    where = {(f.node, f.gpu) for f in causes}
    if len({n for n, _ in where}) != 1:
        return None, None
    node, gpu = next(iter(where))
    return node, gpu if len(where) == 1 else None


def _mean_range(x: np.ndarray, a: int, b: int) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        v = float(np.nanmean(x[a : b + 1]))
    return v if np.isfinite(v) else 0.0


def _phase_shares(signals: Signals, job: str) -> dict[str, np.ndarray]:
    feat = signals.features
    r = feat.ranks
    cols = signals.job_columns(job)
    if not r.phases:
        return {}
    # Shares of the training step only: checkpoint and evaluation time are pauses (masked from the
    # MFU series), and a window that holds a checkpoint would otherwise read as a "storage" drop.
    tot = {
        ph: rolling_sum(np.nansum(np.nan_to_num(v[:, cols]), axis=1)[:, None], feat.rate_window_steps)[:, 0]
        for ph, v in r.phases.items()
        if ph not in c.PAUSE_PHASES
    }
    all_ = sum(tot.values())
    with np.errstate(all="ignore"):
        return {ph: np.where(all_ > 0, v / all_, np.nan) for ph, v in tot.items()}


def _lustre_evidence(feat: Features, a: int, b: int, ba: int, bb: int) -> dict[str, str]:
    f = feat.frames.get(c.LUSTRE_CLIENT_READ_BYTES)
    if not len(f):
        return {}
    from fleetscope.window.frames import rate

    _, vals = f.group((c.NODE_LABEL,), "sum")
    total = np.nansum(np.nan_to_num(rate(vals, feat.step, feat.rate_window_steps)), axis=1)
    return {
        c.LUSTRE_CLIENT_READ_BYTES: f"{_mean_range(total, ba, bb) / 1e6:,.0f} -> "
        f"{_mean_range(total, a, b) / 1e6:,.0f} MB/s (all nodes)"
    }


class MfuDropDetector(Detector):
    """A job's MFU below its own baseline, attributed to what co-occurs: see the module docstring."""

    name = "mfu_drop"
    kinds = ("mfu_drop",)

    def detect(self, signals: Signals, prior: Sequence[Finding]) -> Detection:
        """Every MFU drop of every job; it learns each job's baseline level for the next chunk."""
        feat = signals.features
        learnt = Carry()
        cfg = feat.config
        out: list[Finding] = []
        carried = feat.carry.mfu_base if feat.carry is not None else {}
        for job in feat.jobs:
            lv = _levels(signals, job)
            if lv is None:
                continue
            unit, idx, x, segs, means, base_i, stalls = (
                lv.unit,
                lv.idx,
                lv.x,
                lv.segs,
                lv.means,
                lv.base_i,
                lv.stalls,
            )
            base = means[base_i]
            # A streamed window's earlier chunks saw the job at its level (their best typical level).
            # When even this chunk's best is a drop from it, the chunk lies inside a drop that began
            # before it: that level is the baseline (and the chunk opens in a drop, not in a warm-up).
            # Otherwise the chunk's own best stands.
            before = carried.get(job)
            if before is not None and before[0] == unit and base <= before[1] * (1 - cfg.mfu_drop):
                base = before[1]
            if base <= 0:
                continue
            # What the next chunk of a streamed window measures from: the baseline (in a chunk that
            # ends in a drop, the level the drop fell from; inside one, the level carried in).
            learnt.mfu_base[job] = (unit, base)
            low = [means[i] <= base * (1 - cfg.mfu_drop) for i in range(len(segs))]
            # Merge neighbouring low segments into one drop.
            i = 0
            while i < len(segs):
                if not low[i]:
                    i += 1
                    continue
                j = i
                while j + 1 < len(segs) and low[j + 1]:
                    j += 1
                # The drop begins where the level is first at least half-way down, not where the
                # segmentation's minimum segment length happened to put the change point.
                lo_k, hi_k = segs[i][0], segs[j][1] - 1
                while lo_k < hi_k and x[lo_k] > base * (1 - cfg.mfu_drop / 2):
                    lo_k += 1
                a_i, b_i = idx[lo_k], idx[hi_k]
                # A low level the window opens with, that nothing explains, is a job still warming up
                # (compilation, caches, data-loader workers) rising to its level, not a drop from it.
                leading = i == 0 and before is None and not _explained(signals, job, a_i, b_i, prior)
                if (b_i - a_i + 1) * feat.step >= cfg.mfu_min_drop_s and not leading:
                    lvl = float(np.mean(x[segs[i][0] : segs[j][1]]))
                    found = _drop(
                        signals,
                        job,
                        unit,
                        a_i,
                        b_i,
                        base,
                        base == means[base_i],
                        lvl,
                        segs,
                        idx,
                        base_i,
                        stalls,
                        prior,
                    )
                    if found is not None:
                        out.append(found)
                i = j + 1
        return Detection(out, learnt)
