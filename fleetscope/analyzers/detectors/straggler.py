"""Stragglers: a rank, GPU or node persistently slower than its peers, with the cause named.

Reasoning (analytics.md sections 1, 2 and 5). In synchronous training every rank waits for the
slowest, so the job's step time cannot tell *who* is slow; the per-rank compute time can. For each
rank the compute seconds per step (forward + backward, over ``rate_window_s``) are compared with the
job's other ranks at the same time: score = own / peer median (NVRx uses a ratio to the fastest rank,
which one unusually fast rank distorts; a median is robust), and the modified z-score
0.6745 (x - median) / MAD must also exceed 3.5, so a job whose ranks all jitter does not flag its
noisiest one. Only a deviation of at least 10% (What-if's S > 1.1, Greyhound's 10% verification)
that lasts ``persistence_s`` is reported; GC pauses and slow batches are shorter.

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
from fleetscope.analyzers.detectors.base import Detector
from fleetscope.analyzers.features import Features, fmt_time, robust_z
from fleetscope.analyzers.findings import Finding
from fleetscope.analyzers.frames import iter_runs, rate, rolling_sum

THERMAL_BITS = c.CLOCK_EVENT_SW_THERMAL | c.CLOCK_EVENT_HW_THERMAL

_ACTIONS = {
    "thermal_throttle": "drain after the job's next checkpoint; check the node's fans, airflow and inlet "
    "temperature, then run dcgmi diag -r 3",
    "power_brake": "drain after the job's next checkpoint; check the node's PSUs and power feed (HW power "
    "brake is asserted by the baseboard), then run dcgmi diag -r 3",
    "hw_slowdown": "drain after the job's next checkpoint; run dcgmi diag -r 3 and check the BMC event log",
    "pcie": "drain after the job's next checkpoint; reseat or replace the GPU's PCIe link",
    "network": "drain after the job's next checkpoint; check the EFA device (fi_info, efa hw_counters) and "
    "its cabling; restart the job without this node if retransmits persist",
    "unknown": "compare this rank's kernels with a peer's (nsys) and run dcgmi diag -r 3 on its GPU",
}


def _runs_with_persistence(flag: np.ndarray, p: int, bridge: int = 2) -> list[tuple[int, int]]:
    """Runs of True at least ``p`` long; gaps up to ``bridge`` steps are bridged."""
    f = flag.copy()
    for a, b in iter_runs(~f):
        if a > 0 and b < len(f) - 1 and b - a + 1 <= bridge:
            f[a : b + 1] = True
    return [(a, b) for a, b in iter_runs(f) if b - a + 1 >= p]


def _bits_share(reasons: np.ndarray, a: int, b: int, bits: int) -> float:
    v = reasons[a : b + 1]
    v = v[~np.isnan(v)].astype(np.int64)
    return float(np.mean((v & bits) != 0)) if v.size else 0.0


def _mean(x: np.ndarray) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(np.nanmean(x)) if x.size else float("nan")


def node_network_trouble(feat: Features) -> dict[str, tuple[np.ndarray, dict[str, str]]]:
    """Node -> (per-time degraded flag, evidence) for nodes whose EFA devices misbehave."""
    frames = feat.frames
    cfg = feat.config
    out: dict[str, tuple[np.ndarray, dict[str, str]]] = {}
    if not frames.has(c.EFA_TX_PKTS):
        return out
    keys = (c.NODE_LABEL, "device")
    lab, tx = frames.get(c.EFA_TX_PKTS).group(keys, "sum")
    idx = {tuple(r): i for i, r in enumerate(lab.itertuples(index=False, name=None))}

    def aligned(name: str) -> np.ndarray:
        out_ = np.full(tx.shape, np.nan)
        if frames.has(name):
            l2, v2 = frames.get(name).group(keys, "sum")
            for j, r in enumerate(l2.itertuples(index=False, name=None)):
                if tuple(r) in idx:
                    out_[:, idx[tuple(r)]] = v2[:, j]
        return out_

    tx_rate = rate(tx, feat.step, feat.w)
    re_rate = rate(aligned(c.EFA_RETRANS_PKTS), feat.step, feat.w)
    ev = np.zeros(tx.shape)
    for name in (
        c.EFA_RETRANS_TIMEOUT_EVENTS,
        c.EFA_IMPAIRED_REMOTE_CONN_EVENTS,
        c.EFA_UNRESPONSIVE_REMOTE_EVENTS,
    ):
        r = rate(aligned(name), feat.step, feat.w)
        ev = ev + np.where(np.isnan(r), 0, r)
    with np.errstate(all="ignore"):
        ratio = re_rate / tx_rate
    bad = (np.nan_to_num(ratio) >= cfg.retrans_ratio) | (ev * 60 >= cfg.efa_events_per_min)
    for j, (node, dev) in enumerate(idx):
        if not bad[:, j].any():
            continue
        flag, evidence = out.get(node, (np.zeros(len(feat.times), dtype=bool), {}))
        flag = flag | bad[:, j]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            evidence[f"{dev} retrans_pkts/tx_pkts"] = f"{np.nanmax(ratio[:, j]):.2%}"
            evidence[f"{dev} impaired+unresponsive+timeout events"] = f"{np.nanmax(ev[:, j]) * 60:.1f}/min"
        out[node] = (flag, evidence)
    return out


def _cause(feat: Features, gcol: int | None, node: str, a: int, b: int,
           net: dict[str, tuple[np.ndarray, dict[str, str]]]) -> tuple[str, dict[str, str]]:  # fmt: skip
    cfg = feat.config
    gs = feat.gpus
    ev: dict[str, str] = {}
    if gcol is not None and gs.clock.size:
        before = gs.clock[max(0, a - 3 * feat.w) : max(1, a - feat.w), gcol]
        during = gs.clock[a : b + 1, gcol]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            peer = np.nanmedian(gs.clock[a : b + 1])
        if np.isfinite(_mean(during)):
            ref = _mean(before) if np.isfinite(_mean(before)) else peer
            ev[c.DCGM_FI_DEV_SM_CLOCK] = f"{ref:.0f} -> {_mean(during):.0f} MHz (peers {peer:.0f} MHz)"
        r = gs.reasons[a : b + 1, gcol]
        r = r[~np.isnan(r)]
        if r.size:
            bits = int(np.bitwise_or.reduce(r.astype(np.int64)))
            ev[c.DCGM_FI_DEV_CLOCKS_EVENT_REASONS] = f"0x{bits:x}"
        if np.isfinite(_mean(gs.temp[a : b + 1, gcol])):
            ev[c.DCGM_FI_DEV_GPU_TEMP] = f"{_mean(gs.temp[a : b + 1, gcol]):.0f} C"
        tv = _mean(gs.thermal_viol[a : b + 1, gcol])
        pv = _mean(gs.power_viol[a : b + 1, gcol])
        if np.isfinite(tv) and tv > 0:
            ev[c.DCGM_FI_DEV_THERMAL_VIOLATION] = f"{tv:.0%} of the time"
        if np.isfinite(pv) and pv > 0:
            ev[c.DCGM_FI_DEV_POWER_VIOLATION] = f"{pv:.0%} of the time"
        if (
            _bits_share(gs.reasons[:, gcol], a, b, THERMAL_BITS) >= cfg.reason_share
            or tv >= cfg.violation_share
        ):
            return "thermal_throttle", ev
        if _bits_share(gs.reasons[:, gcol], a, b, c.CLOCK_EVENT_HW_POWER_BRAKE) >= cfg.reason_share or (
            pv >= cfg.violation_share
        ):
            return "power_brake", ev
        if _bits_share(gs.reasons[:, gcol], a, b, c.CLOCK_EVENT_HW_SLOWDOWN) >= cfg.reason_share:
            return "hw_slowdown", ev
        w = gs.pcie_width[:, gcol]
        node_cols = gs.keys[c.NODE_LABEL].to_numpy() == node
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            if np.nanmin(w[a : b + 1], initial=np.inf) < np.nanmax(gs.pcie_width[:, node_cols], initial=0):
                ev[c.DCGM_FI_DEV_PCIE_LINK_WIDTH] = f"x{np.nanmin(w[a : b + 1]):.0f}"
                return "pcie", ev
    if node in net and net[node][0][a : b + 1].any():
        ev.update(net[node][1])
        return "network", ev
    return "unknown", ev


def _finding(feat: Features, node: str, gpu: str | None, rank: int | None, job: str | None,
             a: int, b: int, score: float, cause: str, ev: dict[str, str]) -> Finding:  # fmt: skip
    times = feat.times
    last = len(times) - 1
    ongoing = b >= last - 2
    confirm = min(a + feat.p - 1, last)
    ev["confirmed_at"] = fmt_time(times[confirm])
    return Finding(
        kind="straggler", severity="warning", node=node, gpu=gpu, rank=rank, job_id=job,
        start=float(times[a]), end=None if ongoing else float(times[b]), score=score, cause=cause,
        evidence=ev, action=_ACTIONS.get(cause, _ACTIONS["unknown"]),
    )  # fmt: skip


def rank_scores(feat: Features) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(compute seconds per step, ratio to the job's peer median, modified z) per rank and time."""
    r = feat.ranks
    T = len(feat.times)
    if not r.steps.size:
        z = np.zeros((T, 0))
        return z, z, z
    steps = rolling_sum(r.steps, feat.w)
    comp = rolling_sum(r.compute, feat.w)
    with np.errstate(all="ignore"):
        per_step = np.where(steps >= 2, comp / steps, np.nan)
    ratio = np.full(per_step.shape, np.nan)
    z = np.full(per_step.shape, np.nan)
    jobs = r.keys["job_id"].to_numpy()
    for job in feat.jobs:
        cols = jobs == job
        if cols.sum() < 3:
            continue
        ratio[:, cols], z[:, cols] = robust_z(per_step[:, cols], mad_floor=feat.config.mad_floor)
    return per_step, ratio, z


def detect(feat: Features) -> list[Finding]:
    cfg = feat.config
    findings: list[Finding] = []
    net = node_network_trouble(feat)
    r = feat.ranks
    covered: set[tuple[str, str]] = set()
    per_step, ratio, z = rank_scores(feat)
    for k in range(ratio.shape[1]):
        node, gpu = str(r.keys.iloc[k][c.NODE_LABEL]), str(r.keys.iloc[k]["gpu"])
        if r.present[:, k].any():
            covered.add((node, gpu))
        # Against the peers (NVRx's relative score, with a median), or against its own best level
        # in this window (NVRx's individual score) while still the job's outlier: a fast GPU that
        # throttles by 10% may only reach 1.07 of the median, but it is 10% slower than itself.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            finite = np.isfinite(per_step[:, k])
            own_best = float(np.nanpercentile(per_step[:, k], 10)) if finite.any() else float("nan")
            own = np.nan_to_num(per_step[:, k] / own_best)
        peer, zk = np.nan_to_num(ratio[:, k]), np.nan_to_num(z[:, k])
        flag = (zk >= cfg.straggler_z) & (
            (peer >= cfg.straggler_ratio)
            | ((own >= cfg.straggler_ratio) & (peer >= cfg.straggler_ratio_with_self))
        )
        for a, b in _runs_with_persistence(flag, feat.p, bridge=feat.w):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                score = float(np.nanmedian(ratio[a : b + 1, k]))
                peers = np.nanmedian(per_step[a : b + 1])
            cause, ev = _cause(feat, feat.gpus.col(node, gpu), node, a, b, net)
            ev = {"compute_seconds_per_step": f"{_mean(per_step[a : b + 1, k]):.2f} s (peer median {peers:.2f} s, "
                  f"own best {own_best:.2f} s)", **ev}  # fmt: skip
            rank = int(float(r.keys.iloc[k]["rank"]))
            findings.append(
                _finding(feat, node, gpu, rank, str(r.keys.iloc[k]["job_id"]), a, b, score, cause, ev)
            )
    findings.extend(_hardware_only(feat, covered, net))
    # Network: node-level, only when no rank/GPU finding on that node explains it already.
    for node, (flag, ev) in net.items():
        for a, b in _runs_with_persistence(flag, feat.p, bridge=feat.w):
            findings.append(_finding(feat, node, None, None, feat.jobs[0] if len(feat.jobs) == 1 else None,
                                     a, b, None, "network", dict(ev)))  # type: ignore[arg-type]  # fmt: skip
    findings.sort(key=lambda f: (f.start, f.node or "", f.gpu or ""))
    return findings


def _hardware_only(feat: Features, covered: set[tuple[str, str]], net) -> list[Finding]:
    """GPUs without training telemetry: clock deficit plus a throttle reason or violation time."""
    cfg = feat.config
    gs = feat.gpus
    out: list[Finding] = []
    if not gs.clock.size:
        return out
    busy = np.nan_to_num(gs.util) > 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        peer = np.nanmedian(np.where(busy, gs.clock, np.nan), axis=1, keepdims=True)
    with np.errstate(all="ignore"):
        deficit = 1 - gs.clock / peer
    bits = np.nan_to_num(gs.reasons).astype(np.int64)
    throttled = (
        ((bits & (THERMAL_BITS | c.CLOCK_EVENT_HW_POWER_BRAKE | c.CLOCK_EVENT_HW_SLOWDOWN)) != 0)
        | (np.nan_to_num(gs.thermal_viol) >= cfg.violation_share)
        | (np.nan_to_num(gs.power_viol) >= cfg.violation_share)
    )
    flag = busy & (np.nan_to_num(deficit) >= cfg.clock_deficit) & throttled
    for j, (node, gpu) in enumerate(zip(gs.keys[c.NODE_LABEL], gs.keys["gpu"], strict=True)):
        if (node, gpu) in covered:
            continue
        for a, b in _runs_with_persistence(flag[:, j], feat.p, bridge=feat.w):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                score = float(np.nanmedian(peer[a : b + 1, 0] / gs.clock[a : b + 1, j]))
                tens = np.nanmean(gs.tensor[a : b + 1, j])
                tens_peer = np.nanmedian(gs.tensor[a : b + 1])
            cause, ev = _cause(feat, j, node, a, b, net)
            if np.isfinite(tens):
                ev[c.DCGM_FI_PROF_PIPE_TENSOR_ACTIVE] = (
                    f"{tens:.2f} (peers {tens_peer:.2f}, busy while they wait)"
                )
            out.append(_finding(feat, node, gpu, None, None, a, b, score, cause, ev))
    return out


class StragglerDetector(Detector):
    """Ranks, GPUs and nodes slower than their peers: see the module docstring."""

    name = "straggler"
    kinds = ("straggler",)

    def detect(self, feat: Features, prior: Sequence[Finding]) -> list[Finding]:
        return detect(feat)
