"""Stragglers: a rank, GPU or node persistently slower than its peers, with the cause named.

Reasoning (docs/design.md#stragglers, #peers, #robust-scores). In synchronous training every rank waits for
the slowest, so the job's step time cannot tell *who* is slow; the per-rank compute time can. For each rank
the compute seconds per step (forward + backward, over ``rate_window_s``) are compared with the job's other
ranks at the same time: score = own / peer median (NVRx uses a ratio to the fastest rank, which one unusually
fast rank distorts; a median is robust), and the modified z-score 0.6745 (x - median) / MAD must also exceed
3.5, so a job whose ranks all jitter does not flag its noisiest one. Only a deviation of at least 10%
(What-if's S > 1.1, Greyhound's 10% verification) that lasts ``persistence_s`` is reported; GC pauses and slow
batches are shorter.

Without hardware evidence a rank must also have changed (``self_change``: slower than its own best
level) or, for the views of the GPU's work, be slower than every one of its role peers (the ranks of
the other data-parallel replicas at its place, on other nodes; ``signals/roles.py``,
docs/design.md#role-peers): structure repeats on every replica, a fault does not, so a GPU slow
from the first step is found, and its finding starts at the window's (or its job's) start.

Without training telemetry a GPU is judged from hardware alone: an SM clock at least 8% below its
busy peers' median *together with* a throttle reason bit or a violation counter that is counting
(a short SW power cap is normal and never enough), for ``persistence_s``.

A node whose EFA device retransmits or logs impaired/unresponsive-peer events persistently slows
every collective; it is reported as a node-level straggler with cause ``network``.

Cause, from the GPU's own signals over the finding: HW/SW thermal slowdown bits or thermal
violation time -> ``thermal_throttle``; HW power brake or power violation -> ``power_brake``; HW
slowdown alone -> ``hw_slowdown``; a narrowed PCIe link -> ``pcie``; EFA trouble on its node ->
``network``; nothing -> ``unknown``.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

from fleetscope import contract as c
from fleetscope.analyzers.carry import Carry
from fleetscope.analyzers.detectors.base import Detection, Detector
from fleetscope.analyzers.features import Features, fmt_time
from fleetscope.analyzers.findings import Finding
from fleetscope.analyzers.nanstats import column_nanpercentile, mean_or_nan, nanmedian
from fleetscope.analyzers.signals.hardware import slowdown_cause
from fleetscope.analyzers.signals.network import NetTrouble
from fleetscope.analyzers.signals.roles import RolePeers
from fleetscope.analyzers.signals.runs import runs_with_persistence
from fleetscope.analyzers.signals.simultaneity import WORKLOAD_CAUSE, Workload, workload_slowness
from fleetscope.analyzers.signals.slowness import Slowness
from fleetscope.analyzers.signals.window_signals import Signals

#: Causes the GPU's own hardware names (against a rank merely waiting for one).
_HARDWARE_CAUSES = ("thermal_throttle", "power_brake", "hw_slowdown", "pcie", "ecc_correctable")


_ACTIONS = {
    "thermal_throttle": "drain after the job's next checkpoint; check the node's fans, airflow and inlet "
    "temperature, then run dcgmi diag -r 3",
    "power_brake": "drain after the job's next checkpoint; check the node's PSUs and power feed (HW power "
    "brake is asserted by the baseboard), then run dcgmi diag -r 3",
    "hw_slowdown": "drain after the job's next checkpoint; run dcgmi diag -r 3 and check the BMC event log",
    "pcie": "drain after the job's next checkpoint; reseat or replace the GPU's PCIe link (check its "
    "replays and errors with nvidia-smi -q -d PCIE, lspci -vv)",
    "ecc_correctable": "drain after the job's next checkpoint; its memory corrects errors at a high rate: "
    "run dcgmi diag -r 3 and check nvidia-smi -q -d ECC,ROW_REMAPPER",
    WORKLOAD_CAUSE: "no hardware fault: the job's own work is unevenly spread (MoE expert load, sequence "
    "lengths); tune the router's load balancing (auxiliary loss, capacity factor) or the data packing",
    "network": "drain after the job's next checkpoint; check the EFA device (fi_info, efa hw_counters) and "
    "its cabling; restart the job without this node if retransmits persist",
    "unknown": "compare this rank's kernels with a peer's (nsys) and run dcgmi diag -r 3 on its GPU",
}


def _finding(
    feat: Features,
    node: str,
    gpu: str | None,
    rank: int | None,
    job: str | None,
    a: int,
    b: int,
    score: float | None,
    cause: str,
    ev: dict[str, str],
    since: int | None = None,
    confirm: int | None = None,
) -> Finding:
    """The finding of the slow period a..b (confirmed at grid time ``confirm``, by default
    ``persistence_s`` after a); ``since``: an earlier start, where the slowness was there before it
    could be measured."""
    times = feat.times
    last = len(times) - 1
    ongoing = b >= last - 2
    confirm = min(a + feat.persistence_steps - 1 if confirm is None else confirm, last)
    ev["confirmed_at"] = fmt_time(times[confirm])
    return Finding(
        kind="straggler",
        severity="warning",
        node=node,
        gpu=gpu,
        rank=rank,
        job_id=job,
        start=float(times[a if since is None else since]),
        end=None if ongoing else float(times[b]),
        score=score,
        cause=cause,
        evidence=ev,
        action=_ACTIONS.get(cause, _ACTIONS["unknown"]),
    )


def rank_hardware_evidence(feat: Features, sl: Slowness, throttled: np.ndarray) -> np.ndarray:
    """Per rank and time: its GPU's hardware says it is slower than its peers' GPUs.

    A throttle reason or violation counter
    (:func:`~fleetscope.analyzers.signals.hardware.gpu_throttle_evidence`), or an SM clock
    ``clock_deficit`` below the median of its peer group's GPUs (an admin's locked application
    clocks set no throttle reason, but the clock shows it). Evidence that half the group shares at
    once (a data hall's cooling, a fleet-wide power cap) singles nobody out and does not count.
    """
    r = feat.ranks
    gs = feat.gpus
    T, n = len(feat.times), r.steps.shape[1] if r.steps.size else 0
    out = np.zeros((T, n), dtype=bool)
    if not n or not len(gs.keys):
        return out
    cols = np.array(
        [
            gs.index.get((str(nd), str(g)), -1)
            for nd, g in zip(r.keys[c.NODE_LABEL], r.keys["gpu"], strict=True)
        ]
    )
    have = cols >= 0
    clock = np.full((T, n), np.nan)
    clock[:, have] = gs.clock[:, cols[have]]
    thr = np.zeros((T, n), dtype=bool)
    thr[:, have] = throttled[:, cols[have]]
    for g in np.unique(sl.groups):
        members = (sl.groups == g) & have
        if not members.any():
            continue
        peer = nanmedian(clock[:, members], axis=1, keepdims=True)
        with np.errstate(all="ignore"):
            deficit = np.nan_to_num(1 - clock[:, members] / peer) >= feat.config.clock_deficit
        ev = thr[:, members] | deficit
        common = ev.mean(axis=1, keepdims=True) >= 0.5
        out[:, members] = ev & ~common
    return out


def _best_levels(sl: Slowness, name: str) -> np.ndarray:
    """Every rank's best level (10th percentile over the window) in one slowness view."""
    x = getattr(sl, name)
    return column_nanpercentile(x, 10) if x.size else np.full(x.shape[1], np.nan)


#: (job_id, rank, Hostname, gpu, view) -> the rank's best slowness level in that view (``Carry.rank_best``).
RankBest = dict[tuple[str, ...], float]


def _rank_flags(
    signals: Signals, hw: np.ndarray, has_gpu: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, RankBest]:
    """(slow without hardware evidence, slow with it, slow against every role peer) per grid time
    and rank column (T x ranks), and every rank's best level per view (for the next chunk).

    ``hw``: the ranks' hardware evidence; ``has_gpu``: which ranks' GPUs are on the grid (the
    others can have no hardware evidence). Without hardware evidence a view of the GPU's work
    (compute, forward, tensor activity) counts when the rank is slower than its own best level
    (``self_change``) *or* than every one of its role peers (:mod:`~fleetscope.analyzers.signals.roles`):
    a fault present from the first step has not changed, but it does not repeat on the other
    replicas. The host-side views (data, host, less wait) keep ``self_change`` alone: rank 0's host
    work is a role no layout label names.
    """
    feat = signals.features
    sl = signals.slowness
    cfg = feat.config
    zc = cfg.straggler_z
    learnt: RankBest = {}
    if not sl.z:  # no ranks on the grid
        none = np.zeros(sl.compute.shape, dtype=bool)
        return none, none, none, learnt
    roles = signals.role_peers

    def role(x: np.ndarray) -> np.ndarray:
        return roles.slower_than_all(x, cfg.role_margin)

    def view(name: str, x: np.ndarray, bar: float) -> np.ndarray:
        out = (np.nan_to_num(x) >= bar) & (np.nan_to_num(sl.z[name]) >= zc)
        if name in sl.noise:  # the excess must stand out of the rank's own step-to-step noise
            excess = x - 1 if name in ("compute", "forward") else x
            out &= ~(np.nan_to_num(excess) < cfg.straggler_noise * np.nan_to_num(sl.noise[name]))
        return out

    ids = signals.rank_ids
    before = feat.carry.rank_best if feat.carry is not None else {}

    def changed(name: str, x: np.ndarray) -> np.ndarray:
        """Slower than each rank's own best level (10th percentile) by ``self_change``: in the
        window, or in the chunks before it of a streamed window (carried)."""
        here = _best_levels(sl, name)
        best = here.copy()
        for k in np.nonzero(np.isfinite(here))[0]:
            key = (*ids[k], name)
            learnt[key] = float(here[k])
            if key in before:
                best[k] = min(best[k], before[key])
        out = np.nan_to_num(x - best[None, :]) >= cfg.self_change
        out[:, ~np.isfinite(here)] = False
        return out

    share = cfg.phase_share
    # Timers measure waits as well as work: under pipeline parallelism a later stage waits for
    # activations inside forward. Where the GPU's own tensor activity is served, a timer view
    # counts only when the GPU looks busier than its peers too (or the host phases explain it).
    busy = sl.busy
    agrees = ~np.isfinite(busy) | (np.nan_to_num(busy) >= 1 + (cfg.straggler_ratio - 1) / 2)
    host_side = view("data", sl.data, share) | view("host", sl.host, share)
    by_role = (
        (view("compute", sl.compute, cfg.straggler_ratio) & role(sl.compute) & agrees)
        | (view("forward", sl.forward, cfg.straggler_ratio) & role(sl.forward) & agrees)
        | (view("busy", sl.busy, cfg.straggler_ratio) & role(sl.busy))
    )
    # Persistently: a fault that did not change in the window holds for most of it; a healthy GPU
    # at the slow end of the spread crosses the line for a few minutes now and then.
    measured = (np.isfinite(sl.compute) | np.isfinite(sl.forward) | np.isfinite(sl.busy)).sum(axis=0)
    with np.errstate(all="ignore"):
        held = by_role.sum(axis=0) / measured
    by_role[:, ~(np.nan_to_num(held) >= cfg.role_persistence)] = False
    soft = (
        by_role
        | (view("compute", sl.compute, cfg.straggler_ratio) & changed("compute", sl.compute) & agrees)
        | (view("forward", sl.forward, cfg.straggler_ratio) & changed("forward", sl.forward) & agrees)
        | (view("data", sl.data, share) & changed("data", sl.data))
        | (view("host", sl.host, share) & changed("host", sl.host))
        | (view("less_wait", sl.less_wait, share) & changed("less_wait", sl.less_wait) & (agrees | host_side))
        | (view("busy", sl.busy, cfg.straggler_ratio) & changed("busy", sl.busy))
    )
    mild = cfg.straggler_ratio_with_hw
    mild_share = cfg.phase_share_with_hw
    hard = (
        hw
        & has_gpu[None, :]
        & (
            (np.nan_to_num(sl.compute) >= mild)
            | (np.nan_to_num(sl.forward) >= mild)
            | (np.nan_to_num(sl.busy) >= mild)
            | (np.nan_to_num(sl.less_wait) >= mild_share)
        )
    )
    return soft, hard, by_role, learnt


def _strong_steps(feat: Features) -> int:
    """Grid steps that confirm a slow period with strong evidence: ``strong_confirm_steps``, never
    more than ``persistence_s`` asks of any period."""
    return max(1, min(feat.persistence_steps, feat.config.strong_confirm_steps))


def _large(sl: Slowness, bar: float, noise: float) -> np.ndarray:
    """Per grid time and rank: the GPU's timed work (compute or forward, medians over the rate
    window, not a gauge's moment) at least ``bar`` x its peers', and that excess at least twice the
    noise margin the soft rule asks (where the work per step varies, 20% may still be noise)."""
    out = np.zeros(sl.compute.shape, dtype=bool)
    for name in ("compute", "forward"):
        x = np.nan_to_num(getattr(sl, name))
        se = sl.noise.get(name)
        out |= (x >= bar) & ((x - 1) >= 2 * noise * (np.nan_to_num(se) if se is not None else 0.0))
    return out


def _episodes(
    soft: np.ndarray,
    hard: np.ndarray,
    feat: Features,
    large: np.ndarray | None = None,
    quick: bool = True,
) -> list[tuple[int, int, float, int]]:
    """(first, last, duty cycle, grid time it is confirmed) of each slow period of one rank or GPU.

    Strong evidence is confirmed early: a period with the GPU's own hardware evidence (``hard``)
    once it holds ``strong_confirm_steps`` (two scrape windows), a slowdown of at least
    ``large_slowdown`` (``large``) once it holds one rate window (the median it is measured with).
    Only a small slowdown without evidence must last ``persistence_s``
    (docs/design.md#persistence). Periods confirmed by the hardware closer than ``episode_gap_s``
    are one episode series (a GPU throttling on and off with its fan), reported once with its duty
    cycle.

    ``quick`` False (a GPU judged on its clock gauge alone, no rank's timed work): the hardware's
    evidence needs a third of ``persistence_s`` per period and ``persistence_s`` in all, since a
    gauge's moment is no median (a HW slowdown bit for 45 s at a load change is normal).
    """
    p = feat.persistence_steps
    q = _strong_steps(feat) if quick else max(1, p // 3)
    w = feat.rate_window_steps
    ql = max(q, min(p, w))  # a large slowdown without evidence: held for one rate window
    runs = runs_with_persistence(soft, p, bridge=w)
    hard_runs = runs_with_persistence(hard, q, bridge=w)
    large_runs = runs_with_persistence(soft & large, ql, bridge=w) if large is not None else []
    flagged = np.zeros(len(soft), dtype=bool)
    for a, b in runs + hard_runs + large_runs:
        flagged[a : b + 1] = True
    hard_need = q if quick else p  # the hardware's evidence, in all
    confirm: dict[int, int] = {}
    for rs, need in ((runs, p), (large_runs, ql), (hard_runs, hard_need)):
        for a, _ in rs:
            confirm[a] = min(confirm.get(a, a + need - 1), a + need - 1)
    gap = max(1, round(feat.config.episode_gap_s / feat.step))
    merged: list[tuple[int, int, int]] = []
    for a, b in sorted(runs + hard_runs + large_runs):
        if merged and a - merged[-1][1] <= (gap if hard_runs else w):
            merged[-1] = (merged[-1][0], max(b, merged[-1][1]), min(merged[-1][2], confirm[a]))
        else:
            merged.append((a, b, confirm[a]))
    # Sustained or repeated: a blip shorter than its confirmation is not a straggler.
    need = hard_need if hard_runs else ql if large_runs else p
    return [
        (a, b, float(flagged[a : b + 1].mean()), k) for a, b, k in merged if flagged[a : b + 1].sum() >= need
    ]


def _role_evidence(
    feat: Features, sl: Slowness, roles: RolePeers, n: int, k: int, a: int, b: int
) -> tuple[int, str]:
    """(the finding's first grid time, the ``role_peers`` evidence) of rank ``k`` slower than all its
    role peers over a..b (its size measured there).

    A rank slow from the first grid time its slowness could be measured (the rate window needs
    steps behind it) was slow before: the finding starts at the window's start, or at the rank's
    first grid time when its job started inside the window.
    """
    valid = np.nonzero(
        np.isfinite(sl.forward[:, k]) | np.isfinite(sl.compute[:, k]) | np.isfinite(sl.busy[:, k])
    )[0]
    since, start = "", a
    if valid.size and a <= valid[0] + feat.rate_window_steps:
        present = np.nonzero(feat.ranks.present[:, k])[0]
        first = int(present[0]) if present.size else 0
        start, since = (
            (0, " since before the window opened") if first == 0 else (first, " since the job started")
        )
    sizes = {name: roles.ratio(getattr(sl, name), k, a, b) for name in ("forward", "compute", "busy")}
    sizes = {name: v for name, v in sizes.items() if np.isfinite(v)}
    size = ", ".join(f"{name} {v:.2f}x theirs" for name, v in sizes.items())
    how = (
        "inferred from the ranks' repetition, no layout reported" if roles.inferred[k] else "from the layout"
    )
    top = max(sizes, key=lambda name: sizes[name]) if sizes else "forward"
    slower = roles.slower_than(getattr(sl, top), k, a, b, feat.config.role_margin)
    than = f"its {n} role peers" if slower >= n else f"{slower} of its {n} role peers"
    return start, f"slower than {than}{since} ({size}; role peers {how})"


def _phase_cause(sl: Slowness, k: int, a: int, b: int) -> tuple[str, dict[str, str]]:
    """The phase where a rank's slowness shows, when the hardware names no cause."""
    views = {
        "forward": mean_or_nan(sl.forward[a : b + 1, k]) - 1,
        "compute": mean_or_nan(sl.compute[a : b + 1, k]) - 1,
        "data": mean_or_nan(sl.data[a : b + 1, k]),
        "host": mean_or_nan(sl.host[a : b + 1, k]),
        "less_wait": mean_or_nan(sl.less_wait[a : b + 1, k]),
        "busy": mean_or_nan(sl.busy[a : b + 1, k]) - 1,
    }
    views = {n: v for n, v in views.items() if np.isfinite(v)}
    ev = {"slowness_views": ", ".join(f"{n} {v:+.1%}" for n, v in views.items())}
    if not views:
        return "unknown", ev
    top = max(views, key=lambda n: views[n])
    if top == "data":
        return "data_loading", ev
    if top == "host" or (top == "less_wait" and views.get("host", 0) >= 0.5 * views["less_wait"]):
        return "cpu", ev
    return "unknown", ev


def _one_per_node(feat: Features, findings: list[Finding]) -> list[Finding]:
    """Half or more of a node's GPUs slow in one window: one node-level finding listing them.

    The GPUs' findings are not required to overlap in time: within one analysis window, half a
    node slowing is one node-level incident (a PSU, the host CPU, the node's data loader).
    """
    gpus_on: dict[str, int] = {}
    for node in feat.gpus.keys[c.NODE_LABEL] if len(feat.gpus.keys) else []:
        gpus_on[str(node)] = gpus_on.get(str(node), 0) + 1
    for node in {str(n) for n in feat.ranks.keys[c.NODE_LABEL]} if len(feat.ranks.keys) else set():
        ranks = int((feat.ranks.keys[c.NODE_LABEL].to_numpy() == node).sum())
        gpus_on[node] = max(gpus_on.get(node, 0), ranks)
    out: list[Finding] = []
    by_node: dict[str, list[Finding]] = {}
    for f in findings:
        by_node.setdefault(f.node or "", []).append(f)
    for node, fs in by_node.items():
        n = gpus_on.get(node, 0)
        if len(fs) < 2 or len({f.gpu for f in fs}) < max(2, n / 2):
            out += fs
            continue
        hw_fs = [f for f in fs if f.cause in _HARDWARE_CAUSES]
        causes = [f.cause for f in (hw_fs or fs)]
        cause = max(set(causes), key=causes.count)
        first = min(hw_fs or fs, key=lambda f: f.start)
        ends = [f.end for f in fs]
        ev = {
            "gpus": ", ".join(sorted({f.gpu or "" for f in fs}, key=lambda g: (len(g), g))),
            "ranks": ", ".join(str(x) for x in sorted({f.rank for f in fs if f.rank is not None})),
            **{k: v for k, v in first.evidence.items() if k not in ("confirmed_at",)},
            "confirmed_at": min(f.evidence.get("confirmed_at", "") for f in fs),
        }
        scores = [f.score for f in fs if f.score is not None]
        culprit = {f.gpu for f in hw_fs}
        one_gpu = next(iter(culprit)) if len(culprit) == 1 else None
        out.append(
            Finding(
                kind="straggler",
                severity="warning",
                node=node,
                gpu=one_gpu,
                rank=None,
                job_id=first.job_id,
                start=first.start,
                end=None if None in ends else max(e for e in ends if e is not None),
                score=max(scores) if scores else None,
                cause=cause,
                evidence=ev,
                action=_ACTIONS.get(cause, _ACTIONS["unknown"]),
            )
        )
    return out


def _hardware_only(
    feat: Features, covered: list[Finding], net: NetTrouble, throttled: np.ndarray
) -> list[Finding]:
    """GPUs whose clock is well below their busy peers' while a throttle reason or violation counts.

    For GPUs without training telemetry this is the only evidence; for a GPU whose rank has its own
    finding at the same time it adds nothing and is skipped.
    """
    cfg = feat.config
    gs = feat.gpus
    out: list[Finding] = []
    if not gs.clock.size:
        return out
    busy = np.nan_to_num(gs.util) > 0
    peer = nanmedian(np.where(busy, gs.clock, np.nan), axis=1, keepdims=True)
    with np.errstate(all="ignore"):
        deficit = 1 - gs.clock / peer
    flag = busy & (np.nan_to_num(deficit) >= cfg.clock_deficit) & throttled
    for j, (node, gpu) in enumerate(zip(gs.keys[c.NODE_LABEL], gs.keys["gpu"], strict=True)):
        for a, b, duty, confirm in _episodes(np.zeros(len(flag), dtype=bool), flag[:, j], feat, quick=False):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                score = float(np.nanmedian(peer[a : b + 1, 0] / gs.clock[a : b + 1, j]))
                tens = np.nanmean(gs.tensor[a : b + 1, j])
                tens_peer = np.nanmedian(gs.tensor[a : b + 1])
            cause, ev = slowdown_cause(feat, j, node, a, b, net)
            if np.isfinite(tens):
                ev[c.DCGM_FI_PROF_PIPE_TENSOR_ACTIVE] = (
                    f"{tens:.2f} (peers {tens_peer:.2f}, busy while they wait)"
                )
            if duty < 0.9:
                ev["duty_cycle"] = f"{duty:.0%} of {(b - a + 1) * feat.step / 60:.0f} min"
            t0, t1 = float(feat.times[a]), float(feat.times[b])
            if any(
                f.node == node and f.gpu == gpu and f.start <= t1 and (f.end or t1) >= t0 for f in covered
            ):
                continue  # the rank on this GPU has its finding already
            out.append(_finding(feat, node, gpu, None, None, a, b, score, cause, ev, confirm=confirm))
    return out


def _one_per_incident(feat: Features, findings: list[Finding]) -> list[Finding]:
    """One incident, one finding: slow periods of one GPU (its rank, or the GPU alone) closer than
    ``incident_gap_s`` become one finding with their occurrence pattern (a marginal part recurs:
    a flaky link slows some steps, quiet ones between). The cause is the GPU's hardware where any
    period names it, the finding starts with the first and stays open if the last does."""
    gap = feat.config.incident_gap_s
    out: list[Finding] = []
    groups: dict[tuple, list[Finding]] = {}
    for f in findings:
        if f.node is None or f.gpu is None:
            out.append(f)
            continue
        groups.setdefault((f.job_id, f.rank, f.node, f.gpu), []).append(f)
    for fs in groups.values():
        fs.sort(key=lambda f: f.start)
        run = [fs[0]]
        for f in fs[1:]:
            prev_end = max((g.end if g.end is not None else np.inf) for g in run)
            if f.start - prev_end <= gap:
                run.append(f)
            else:
                out.append(_merge_incident(feat, run))
                run = [f]
        out.append(_merge_incident(feat, run))
    return out


def _merge_incident(feat: Features, run: list[Finding]) -> Finding:
    if len(run) == 1:
        return run[0]
    hw = [f for f in run if f.cause in _HARDWARE_CAUSES]
    causes = [f.cause for f in (hw or run)]
    cause = max(dict.fromkeys(causes), key=causes.count)
    lead = next(f for f in run if f.cause == cause)
    last_t = float(feat.times[-1])
    ends = [f.end for f in run]
    end = None if None in ends else max(e for e in ends if e is not None)
    span = (end if end is not None else last_t) - run[0].start
    slow = sum(((f.end if f.end is not None else last_t) - f.start) for f in run)
    scores = [f.score for f in run if f.score is not None]
    ev = {k: v for k, v in lead.evidence.items() if k != "confirmed_at"}
    ev["episodes"] = (
        f"{len(run)} episodes over {span / 60:.0f} min, slow {min(1.0, slow / span) if span > 0 else 1:.0%} "
        "of it (one incident: the same GPU again)"
    )
    ev["confirmed_at"] = min(f.evidence.get("confirmed_at", "") for f in run)
    return Finding(
        kind="straggler",
        severity="warning",
        node=lead.node,
        gpu=lead.gpu,
        rank=lead.rank,
        job_id=lead.job_id,
        start=run[0].start,
        end=end,
        score=max(scores) if scores else None,
        cause=cause,
        evidence=ev,
        action=_ACTIONS.get(cause, _ACTIONS["unknown"]),
    )


def _workload_findings(feat: Features, workload: Workload) -> list[Finding]:
    """One job-level info finding per job whose slowness moved between replicas' roles."""
    out = []
    last = len(feat.times) - 1
    for job in dict.fromkeys(sp.job for sp in workload.spans):
        spans = [sp for sp in workload.spans if sp.job == job]
        a = min(sp.a for sp in spans)
        b = max(sp.b for sp in spans)
        parts = [
            f"{sp.role} on {sp.replicas} replicas, {(sp.b - sp.a + 1) * feat.step / 60:.0f} min"
            for sp in spans[:6]
        ]
        if len(spans) > 6:
            parts.append(f"{len(spans) - 6} more")
        out.append(
            Finding(
                kind="straggler",
                severity="info",
                node=None,
                gpu=None,
                rank=None,
                job_id=job,
                start=float(feat.times[a]),
                end=None if b >= last - 2 else float(feat.times[b]),
                score=None,
                cause=WORKLOAD_CAUSE,
                evidence={
                    "imbalance": "; ".join(parts),
                    "pattern": "slow on the same role of several replicas at once, on "
                    f"{len({sp.role for sp in spans})} role(s) in turn, no hardware sign: the job's work "
                    "(MoE routing, data), not a fault",
                    "confirmed_at": fmt_time(feat.times[min(spans[0].a + feat.persistence_steps - 1, last)]),
                },
                action=_ACTIONS[WORKLOAD_CAUSE],
            )
        )
    return out


def _step_change(signals: Signals, node: str, a: int, b: int) -> dict[str, str]:
    """The step time of the node's job over a..b against before: every collective waits for the
    node's network, so every rank's step (and communication) time grows."""
    feat = signals.features
    r = feat.ranks
    if not r.steps.size:
        return {}
    on = r.keys[c.NODE_LABEL].to_numpy().astype(str) == node
    if not on.any():
        return {}
    job = str(r.keys["job_id"].to_numpy()[on][0])
    cols = signals.job_columns(job)
    secs = np.nansum(np.nan_to_num(r.step_seconds[:, cols]), axis=1)
    steps = np.nansum(np.nan_to_num(r.steps[:, cols]), axis=1)

    def per_step(lo: int, hi: int) -> float:
        s, n = secs[lo:hi].sum(), steps[lo:hi].sum()
        return float(s / n) if n > 0 else float("nan")

    before, during = per_step(max(0, a - 3 * feat.persistence_steps), a), per_step(a, b + 1)
    if not (np.isfinite(before) and np.isfinite(during)) or before <= 0:
        return {}
    change = f"{before:.2f} -> {during:.2f} s per step of job {job} ({during / before - 1:+.0%})"
    return {"step_seconds": change}


class StragglerDetector(Detector):
    """Ranks, GPUs and nodes slower than their peers: see the module docstring."""

    name = "straggler"
    kinds = ("straggler",)

    def detect(self, signals: Signals, prior: Sequence[Finding]) -> Detection:
        """Every straggler of the window: ranks, GPUs without telemetry, and nodes (see the module
        docstring); it learns every rank's best slowness level for the next chunk."""
        feat = signals.features
        findings: list[Finding] = []
        net = signals.network_trouble
        sl = signals.slowness
        hw_all = signals.gpu_throttle
        errors = signals.gpu_errors
        link = errors.any()
        rank_hw = rank_hardware_evidence(feat, sl, hw_all if link is None else hw_all | link)
        score = sl.score()
        ids = signals.rank_ids
        gcols = [feat.gpus.col(node, gpu) for _job, _rank, node, gpu in ids]
        has_gpu = np.array([g is not None for g in gcols], dtype=bool)
        softs, hards, by_role, rank_best = _rank_flags(signals, rank_hw, has_gpu)
        roles = signals.role_peers
        # Slowness of the GPU's work (compute, forward, tensor activity) on one role of several replicas
        # at once, moving or fading, is the job's work (MoE routing, sequence lengths). Host-side views
        # (data, host, less wait) are never masked: a shared data path is no role.
        cfg = feat.config
        work = (
            (np.nan_to_num(sl.compute) >= cfg.straggler_ratio)
            | (np.nan_to_num(sl.forward) >= cfg.straggler_ratio)
            | (np.nan_to_num(sl.busy) >= cfg.straggler_ratio)
        )
        workload = workload_slowness(feat, roles, sl.groups, ids, softs & work, rank_hw)
        softs = softs & ~(workload.mask & work)
        large = _large(sl, cfg.large_slowdown, cfg.straggler_noise)
        n_peers = roles.count()
        for k in range(score.shape[1]):
            job_id, rank_s, node, gpu = ids[k]
            gcol = gcols[k]
            soft, hard = softs[:, k], hards[:, k]
            if not (soft.any() or hard.any()):
                continue
            for a, b, duty, confirm in _episodes(soft, hard, feat, large[:, k]):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    sc = float(np.nanmedian(score[a : b + 1, k]))
                cause, ev = slowdown_cause(feat, gcol, node, a, b, net, errors)
                if cause == "unknown":
                    cause, pev = _phase_cause(sl, k, a, b)
                    ev.update(pev)
                ev = {
                    "slowness": f"{sc:.2f} x its peers' (group of {int((sl.groups == sl.groups[k]).sum())} "
                    "ranks)",
                    **ev,
                }
                since = None
                if by_role[a : b + 1, k].mean() >= 0.5 and cause not in _HARDWARE_CAUSES:
                    since, ev["role_peers"] = _role_evidence(feat, sl, roles, int(n_peers[k]), k, a, b)
                if duty < 0.9:
                    ev["duty_cycle"] = f"{duty:.0%} of {(b - a + 1) * feat.step / 60:.0f} min"
                findings.append(
                    _finding(feat, node, gpu, int(float(rank_s)), job_id, a, b, sc, cause, ev, since, confirm)
                )
        findings.extend(_hardware_only(feat, list(findings), net, hw_all))
        findings = _one_per_incident(feat, findings)
        findings = _one_per_node(feat, findings)
        findings.extend(_workload_findings(feat, workload))
        # Network: node-level; it replaces the node's own rank findings that it explains. The EFA
        # counters are the hardware's own evidence: confirmed within two scrape windows.
        q = _strong_steps(feat)
        for node, (flag, nev) in net.items():
            for a, b in runs_with_persistence(flag, q, bridge=feat.rate_window_steps):
                t0, t1 = float(feat.times[a]), float(feat.times[b])
                findings = [
                    f
                    for f in findings
                    if not (
                        f.node == node
                        and f.cause in ("network", "unknown", "cpu")
                        and f.start <= t1
                        and (f.end or t1) >= t0
                    )
                ]
                findings.append(
                    _finding(
                        feat,
                        node,
                        None,
                        None,
                        feat.jobs[0] if len(feat.jobs) == 1 else None,
                        a,
                        b,
                        None,
                        "network",
                        {**nev, **_step_change(signals, node, a, b)},
                        confirm=a + q - 1,
                    )
                )
        findings.sort(key=lambda f: (f.start, f.node or "", f.gpu or ""))
        return Detection(findings, Carry(rank_best=rank_best))
