"""Failing nodes: hardware that must leave the job (fail-stop), with the GPU named where one is.

Reasoning. A GPU that logs a drain-class XID (NVIDIA's XID catalog: 79 fallen off the bus, 48
double-bit ECC, 64 row-remap failure, ...; docs/design.md#xid-classes), that the exporter reports as
lost (``fleetscope_gpu_up`` 0) or whose series stop while the node's other GPUs keep reporting, that
counts an uncorrectable ECC error or a failed row remap, or for which the driver asks for a recovery
action, is broken: the job will crash on it again, so the node is drained. A PCIe link that trained
narrower than its peers is a degraded (warning) finding: the GPU works but needs a reseat or RMA.
When the whole job stalls and one node's ranks disappear first, that node is where it broke. And
a node whose exporter stops answering as its job goes down (``node_down``) crashed: the exporter is
a daemon on the node, so only the node itself (kernel panic, power, its network) takes it away;
the job's processes exiting, a planned stop, or user code failing leave it up. So when a job goes
down (every rank's series gone) and one of its nodes' GPU series went away at or before that, for
longer than a missed scrape, while the job's other nodes' exporters keep reporting, that node is
where the job broke -- if it went away *before* the others' ranks stopped, while those ranks kept
their GPUs spinning in a collective waiting for it, or if it comes back later (it rebooted). A
node removed when its job stopped (at the same grid time, not back) or after the survivors went
idle is a departure, which the membership detector reports.

Each signal is one rule of :data:`RULES`: a small function of the window's signals that yields an
:class:`Event` (a node, a GPU, a cause, a grid time, one line of evidence) for each GPU or node that
shows it. The events of one GPU are merged into one finding whose cause is the most specific
(``gpu_lost`` > ``ecc_uncorrectable`` > ``row_remap_failure`` > other drain XIDs (``xids.finding_cause``)
> ``recovery_action`` > ``node_down`` > ``ranks_stopped`` > ``pcie_width_drop``). Findings stay open
(``end`` null): none of these signals clears without a reset.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from fleetscope import contract as c
from fleetscope import hardware, labels, xids
from fleetscope.analyzers.detectors.base import Detection, Detector
from fleetscope.analyzers.features import Features, fmt_time
from fleetscope.analyzers.findings import Finding
from fleetscope.analyzers.signals.failure_causes import CAUSE_PRIORITY, base_cause
from fleetscope.analyzers.signals.window_signals import Signals
from fleetscope.window.frames import increase_steps, iter_runs


@dataclass(frozen=True)
class Event:
    """One signal of a broken GPU (``gpu`` empty: of the node) at grid index ``at``."""

    node: str
    gpu: str
    #: The finding's cause: a member of ``CAUSE_PRIORITY``, or ``xid_<code>`` (family ``xid``).
    cause: str
    at: int
    #: The evidence's key (the series or XID that shows it) and text.
    key: str
    text: str


#: One rule: every event of its signal in the window, in the order its GPUs or nodes come.
Rule = Callable[[Signals], Iterator[Event]]


_ACTIONS = {
    "gpu_lost": "drain the node now (whatever ran on this GPU, job or replica, lost it); power-cycle it, run "
    "dcgmi diag -r 3, RMA the GPU if XID 79 repeats",
    "ecc_uncorrectable": "drain the node; reset the GPU (nvidia-smi -r) to activate the remapped row, run "
    "dcgmi diag -r 3; RMA if uncorrectable errors repeat",
    "row_remap_failure": "drain the node: the GPU has no spare rows left; RMA the GPU",
    "xid": "drain the node after the job's next checkpoint; reset the GPU and run dcgmi diag -r 3",
    "recovery_action": "drain the node and do the recovery action the driver asks for",
    "node_down": "drain the node; read its kernel log (kdump, BMC/IPMI event log) for why it went down "
    "and run dcgmi diag -r 3 before it rejoins",
    "ranks_stopped": "check the node's training logs and kernel log; drain it if the failure repeats",
    "pcie_width_drop": "drain the node after the job's next checkpoint; reseat or replace the GPU's PCIe "
    "link (check with lspci -vv, nvidia-smi -q -d PCIE)",
}


def _first_event(mask: np.ndarray) -> int | None:
    idx = np.nonzero(mask)[0]
    return int(idx[0]) if idx.size else None


# ---------------------------------------------------------------------------------------- the rules


def xid_counted(signals: Signals) -> Iterator[Event]:
    """fleetscope's XID counter: any increase (or a first sample > 0) of a drain-class XID."""
    times = signals.features.times
    xt = signals.features.frames.get(c.GPU_XID_ERRORS_TOTAL)
    xt_xid, xt_node, xt_gpu = xt.column("xid"), xt.column(c.NODE_LABEL), xt.column("gpu")
    for j in range(len(xt)):
        xid = labels.label_index(xt_xid[j], labels.MAX_XID, "xid")
        if xid is None or xids.xid_class(xid) != "drain":
            continue
        v = xt.values[:, j]
        inc = increase_steps(v[:, None])[:, 0]
        first_valid = _first_event(~np.isnan(v))
        hit = (inc > 0) | ((np.arange(len(v)) == first_valid) & (v > 0))
        i = _first_event(hit)
        if i is None:
            continue
        yield Event(
            str(xt_node[j]),
            str(xt_gpu[j]),
            xids.finding_cause(xid),
            i,
            f"XID {xid}",
            f"{int(np.nanmax(v))} at {fmt_time(times[i])} ({xids.xid_class(xid)} class)",
        )


def xid_last_seen(signals: Signals) -> Iterator[Event]:
    """dcgm-exporter's XID gauge (the last XID code), for clusters without fleetscope's counter."""
    times = signals.features.times
    xg = signals.features.frames.get(c.DCGM_FI_DEV_XID_ERRORS)
    xg_node, xg_gpu = xg.column(c.NODE_LABEL), xg.column("gpu")
    for j in range(len(xg)):
        v = xg.values[:, j]
        for xid in {int(x) for x in np.unique(v[~np.isnan(v)]) if x > 0}:
            if xids.xid_class(xid) != "drain":
                continue
            i = _first_event(v == xid)
            if i is None:
                continue
            yield Event(
                str(xg_node[j]),
                str(xg_gpu[j]),
                xids.finding_cause(xid),
                i,
                f"XID {xid}",
                f"last XID {xid} at {fmt_time(times[i])}",
            )


def _per_gpu(
    signals: Signals,
    name: str,
    test: Callable[[np.ndarray], np.ndarray],
    cause: str,
    text: Callable[[np.ndarray, int], str],
) -> Iterator[Event]:
    """An event on each GPU of series ``name`` where ``test`` (of every GPU's values at once, T x
    GPUs) first holds; ``text(values, grid index)`` is its evidence."""
    f = signals.features.frames.get(name)
    if not len(f):
        return
    lab, vals = f.group((c.NODE_LABEL, "gpu"))
    lab_node, lab_gpu = lab[c.NODE_LABEL].to_numpy(dtype=object), lab["gpu"].to_numpy(dtype=object)
    masks = test(vals)  # every GPU at once; one loop over the GPUs that show it
    for j in np.nonzero(masks.any(axis=0))[0]:
        i = _first_event(masks[:, j])
        if i is not None:
            yield Event(str(lab_node[j]), str(lab_gpu[j]), cause, i, name, text(vals[:, j], i))


def _counted(v: np.ndarray) -> np.ndarray:
    return np.nan_to_num(increase_steps(v)) > 0


def gpu_reported_lost(signals: Signals) -> Iterator[Event]:
    """The exporter reports the GPU lost (``fleetscope_gpu_up`` 0)."""
    times = signals.features.times
    yield from _per_gpu(
        signals, c.GPU_UP, lambda v: v == 0, "gpu_lost", lambda v, i: f"0 since {fmt_time(float(times[i]))}"
    )


def double_bit_ecc(signals: Signals) -> Iterator[Event]:
    """The GPU counts a volatile double-bit (uncorrectable) ECC error."""
    yield from _per_gpu(
        signals,
        c.DCGM_FI_DEV_ECC_DBE_VOL_TOTAL,
        _counted,
        "ecc_uncorrectable",
        lambda v, i: f"+{np.nanmax(v) - np.nanmin(v):g} double-bit errors",
    )


def rows_remapped_uncorrectable(signals: Signals) -> Iterator[Event]:
    """The GPU remapped a memory row for an uncorrectable error."""
    yield from _per_gpu(
        signals,
        c.DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS,
        _counted,
        "ecc_uncorrectable",
        lambda v, i: f"+{np.nanmax(v) - np.nanmin(v):g} rows remapped for uncorrectable errors",
    )


def row_remap_failed(signals: Signals) -> Iterator[Event]:
    """The GPU could not remap a failing row (``DCGM_FI_DEV_ROW_REMAP_FAILURE`` 1)."""
    yield from _per_gpu(
        signals, c.DCGM_FI_DEV_ROW_REMAP_FAILURE, lambda v: v >= 1, "row_remap_failure", lambda v, i: "1"
    )


def recovery_action(signals: Signals) -> Iterator[Event]:
    """The driver asks for a recovery action (reset, reboot, drain)."""
    yield from _per_gpu(
        signals,
        c.DCGM_FI_DEV_GPU_RECOVERY_ACTION,
        lambda v: v > 0,
        "recovery_action",
        lambda v, i: f"{int(np.nanmax(v))} ({hardware.RECOVERY_ACTIONS.get(int(np.nanmax(v)), '?')})",
    )


def _node_codes(feat: Features) -> np.ndarray:
    """Each GPU column's node as a number."""
    return pd.factorize(feat.gpus.keys[c.NODE_LABEL].to_numpy(dtype=object))[0]


def pcie_width_drop(signals: Signals) -> Iterator[Event]:
    """A PCIe link narrower than the widest seen on the node's GPUs (all HGX GPUs train the same width)."""
    feat = signals.features
    gs = feat.gpus
    node_code = _node_codes(feat)
    if not gs.pcie_width.size:
        return
    # the widest link seen on each node's GPUs over the window (NaN for a node without any)
    widest = np.full(int(node_code.max(initial=-1)) + 1, -np.inf)
    np.maximum.at(widest, node_code, np.where(np.isnan(gs.pcie_width), -np.inf, gs.pcie_width).max(axis=0))
    widest[np.isneginf(widest)] = np.nan
    for j, (node, gpu) in enumerate(zip(gs.keys[c.NODE_LABEL], gs.keys["gpu"], strict=True)):
        ref = widest[node_code[j]]
        v = gs.pcie_width[:, j]
        i = _first_event(v < ref)
        if i is not None:
            yield Event(
                node, gpu, "pcie_width_drop", i, c.DCGM_FI_DEV_PCIE_LINK_WIDTH, f"x{int(ref)} -> x{int(v[i])}"
            )


def gpu_series_stopped(signals: Signals) -> Iterator[Event]:
    """The GPU's series stop while the node's other GPUs continue: it fell off without a word."""
    feat = signals.features
    gs, times = feat.gpus, feat.times
    clock = gs.clock
    if not clock.size:
        return
    node_code = _node_codes(feat)
    last = len(times) - 1
    have = ~np.isnan(clock)
    for j, (node, gpu) in enumerate(zip(gs.keys[c.NODE_LABEL], gs.keys["gpu"], strict=True)):
        if not have[:, j].any() or have[last, j]:
            continue
        stop = int(np.nonzero(have[:, j])[0][-1]) + 1
        peers = (node_code == node_code[j]) & (np.arange(len(gs.keys)) != j)
        if peers.any() and have[last, peers].any() and have[stop:, peers].any():
            yield Event(
                node,
                gpu,
                "gpu_lost",
                stop,
                "series",
                f"GPU series stopped at {fmt_time(times[stop])} while the node's other GPUs kept reporting",
            )


def ranks_stopped(signals: Signals) -> Iterator[Event]:
    """During a job's stall, ranks whose series vanished first mark the node (and GPU) that broke.

    First by ``stall_s`` at least: a rank gone while the job's other ranks keep their processes
    (and their series) that much longer. When the job is aborted every process exits at once and
    each node's series end at its own last scrape, within one scrape interval of the others: those
    are no first. A rank that misses a scrape comes back within the stall: not gone. Only while the
    job's other GPUs stay busy (their collectives spin, waiting for the lost ranks): a job that the
    scheduler stops leaves its GPUs idle, and the ranks that end first there are just the first to
    exit (docs/design.md#hangs).
    """
    feat = signals.features
    r = feat.ranks
    need = max(2, round(feat.config.stall_s / feat.step))
    rank_nodes = r.keys[c.NODE_LABEL].to_numpy().astype(str)
    for job in feat.jobs:
        cols = signals.job_columns(job)
        for a, b in signals.job_stalls(job):
            if a == 0:
                continue
            live = np.nonzero(cols & r.present[a - 1])[0]
            if live.size < 2:
                continue
            seg = r.present[a - 1 : b + 1][:, live]
            last = a - 1 + (seg.shape[0] - 1 - np.argmax(seg[::-1], axis=0))  # each rank's last sample
            vanished = np.zeros(len(cols), dtype=bool)
            for n, k in enumerate(live):
                others = last[rank_nodes[live] != rank_nodes[k]]
                if others.size and last[n] + need <= np.median(others):
                    vanished[k] = True
            if not vanished.any() or vanished.sum() > max(8, 0.25 * live.size):
                continue
            gone = {str(n) for n in rank_nodes[vanished]}
            first = int(last[vanished[live]].min()) + 1
            util = signals.gpu_busy(signals.job_nodes(job) - gone, first, b)
            if util is not None and util < feat.config.hang_util:
                continue
            for k in np.nonzero(vanished)[0]:
                node, gpu = str(r.keys.iloc[k][c.NODE_LABEL]), str(r.keys.iloc[k]["gpu"])
                yield Event(
                    node,
                    gpu,
                    "ranks_stopped",
                    a,
                    "training",
                    f"rank {r.keys.iloc[k]['rank']} stopped "
                    f"reporting when the job stalled at {fmt_time(feat.times[a])}",
                )


def _exporter_presence(feat: Features) -> dict[str, np.ndarray]:
    """Node -> per grid time: any of its accelerator series (the node's exporter) has a sample: its
    GPU series, or on a Trainium node its Neuron device count."""
    out: dict[str, np.ndarray] = {}

    def seen(nodes: np.ndarray, have: np.ndarray) -> None:
        for j, node in enumerate(nodes.astype(str)):
            out[str(node)] = out.get(str(node), np.zeros(len(feat.times), dtype=bool)) | have[:, j]

    gs = feat.gpus
    if len(gs.keys):
        seen(gs.keys[c.NODE_LABEL].to_numpy(), ~np.isnan(gs.clock) | ~np.isnan(gs.util))
    neuron = feat.frames.get(c.NEURON_DEVICES)
    if len(neuron):
        labels, values = neuron.group((c.NODE_LABEL,), "max")
        seen(labels[c.NODE_LABEL].to_numpy(), ~np.isnan(values))
    return out


def _spacing(here: np.ndarray) -> int:
    """How long a sample of a series holds, in grid steps: 1 on a grid no finer than its scrape
    interval; on a finer one, one step more than nine in ten of its spacings (jitter)."""
    idx = np.nonzero(here)[0]
    if idx.size < 3:
        return 1
    diffs = np.diff(idx)
    return 1 if np.median(diffs) <= 1 else int(np.percentile(diffs, 90)) + 1


def _held(here: np.ndarray, k: int) -> np.ndarray:
    """``here`` with each sample held ``k - 1`` grid steps more (on a grid finer than the scrape
    interval a series is absent between its samples: not gone)."""
    if k <= 1:
        return here
    out = here.copy()
    for s in range(1, k):
        out[s:] |= here[:-s]
    return out


def _went_away(here: np.ndarray, d: int, lo: int, k: int) -> int | None:
    """The first grid time (at ``lo`` or later) from which the exporter stays away through ``d``,
    two grid steps at least and for twice as long as a sample holds (``k``): more than a missed
    scrape (None: it reported at ``d``, or only missed a scrape)."""
    seen = np.nonzero(here[: d + 1])[0]
    if not seen.size or seen[-1] >= d:
        return None  # still reporting when the job went down
    g = int(seen[-1]) + 1
    back = np.nonzero(here[g:])[0]
    away = int(back[0]) if back.size else len(here) - g
    return None if g < lo or d - g < 1 or away < max(2, 2 * k) else g


def node_down(signals: Signals) -> Iterator[Event]:
    """When a job goes down, the node whose exporter stopped answering first (module docstring).

    Grid times: ``d`` the first without any of the job's ranks; ``g`` the first without the node's
    exporter (its GPU series) since it last reported. The node crashed when its exporter stays
    away from ``g`` through ``d`` (two grid steps at least: not a missed scrape), the job's
    other nodes' exporters report at ``d`` (not a monitoring outage), and either ``g < d`` with the
    other nodes' GPUs busy in between (their ranks spin in a collective waiting for it: a planned
    stop leaves them idle), or the exporter comes back later in the window (the node rebooted).
    """
    feat = signals.features
    exp = _exporter_presence(feat)
    if not exp:
        return
    k = max(_spacing(here) for here in exp.values())
    exp = {n: _held(here, k) for n, here in exp.items()}
    r = feat.ranks
    T = len(feat.times)
    back = max(1, round(feat.config.hang_lookback_s / feat.step))
    rank_nodes = r.keys[c.NODE_LABEL].to_numpy().astype(str)
    for job in feat.jobs:
        cols = signals.job_columns(job)
        up = _held(np.asarray(r.present[:, cols].any(axis=1), dtype=bool), k)
        for d, _e in iter_runs(~up):
            if d == 0 or d + 1 >= T:
                continue
            lo = max(0, d - back)
            nodes = {str(n) for n in rank_nodes[cols & r.present[lo:d].any(axis=0)]}
            down = [
                (n, g) for n in sorted(nodes & set(exp)) if (g := _went_away(exp[n], d, lo, k)) is not None
            ]
            if not down or len(down) > max(1, len(nodes) // 4):
                continue  # the whole job's monitoring went away, not one node
            others = [exp[n][d] for n in nodes & set(exp) if n not in {x for x, _ in down}]
            if not others or sum(others) < 0.5 * len(others):
                continue
            for node, g in down:
                rebooted = bool(exp[node][d + 1 :].any())
                if g < d:
                    util = signals.gpu_busy(nodes - {node}, g, d - 1)
                    busy = util is None or util >= feat.config.hang_util
                else:
                    busy = False
                if not (busy or rebooted):
                    continue
                why = (
                    "came back later (rebooted)"
                    if rebooted and not busy
                    else ("while the job's other ranks kept their GPUs busy until the abort")
                )
                yield Event(
                    node,
                    "",
                    "node_down",
                    g,
                    "series",
                    f"every GPU series of the node stopped at "
                    f"{fmt_time(feat.times[g])}, as job {job} went down at {fmt_time(feat.times[d])}; "
                    f"the other nodes' exporters kept reporting; {why}",
                )


#: Every rule, in the order their events are merged (on a tie in time, the earlier rule's evidence).
RULES: tuple[Rule, ...] = (
    xid_counted,
    xid_last_seen,
    gpu_reported_lost,
    double_bit_ecc,
    rows_remapped_uncorrectable,
    row_remap_failed,
    recovery_action,
    pcie_width_drop,
    gpu_series_stopped,
    ranks_stopped,
    node_down,
)


def first_per_cause(events: Iterable[Event]) -> dict[tuple[str, str], dict[str, Event]]:
    """(node, gpu) -> cause family -> its first event (on a tie, the one that came first)."""
    out: dict[tuple[str, str], dict[str, Event]] = {}
    for e in events:
        per = out.setdefault((e.node, e.gpu), {})
        family = base_cause(e.cause)
        prev = per.get(family)
        if prev is None or e.at < prev.at:
            per[family] = e
    return out


def findings_of(events: Iterable[Event], feat: Features) -> list[Finding]:
    """One finding per GPU (or node) with its most specific cause and every event as evidence, then
    one per node (:func:`one_per_node`)."""
    times = feat.times
    # The rank that ran on each GPU (the last one seen), so a finding names it too.
    rank_of: dict[tuple[str, str], tuple[int, str]] = {}
    rk = feat.ranks.keys
    if len(rk):
        cols = [rk[k].to_numpy(dtype=object) for k in (c.NODE_LABEL, "gpu", "rank", "job_id")]
        for node, gpu, rank, job in zip(*cols, strict=True):
            if (index := labels.parse_index(str(rank), labels.MAX_RANK)) is not None:
                rank_of[(str(node), str(gpu))] = (index, str(job))
    findings = []
    for (node, gpu), per in first_per_cause(events).items():
        cause = next(p for p in CAUSE_PRIORITY if p in per)
        start_i = min(e.at for e in per.values())
        evidence = {e.key: e.text for e in sorted(per.values(), key=lambda e: (e.at, e.key, e.text))}
        rank, job = rank_of.get((node, gpu), (None, None))
        findings.append(
            Finding(
                kind="failing_node",
                severity="warning" if cause == "pcie_width_drop" else "critical",
                node=node,
                gpu=gpu or None,
                rank=rank,
                job_id=job,
                start=float(times[start_i]),
                cause=per[cause].cause,
                action=_ACTIONS[cause],
                evidence=evidence,
            )
        )
        findings[-1].evidence["confirmed_at"] = fmt_time(times[start_i])
    return one_per_node(findings)


def one_per_node(findings: list[Finding]) -> list[Finding]:
    """One failing-node finding per node and incident: the most specific cause, the others as evidence.

    A GPU that falls off the bus takes its rank down and the job's other ranks on that node with it:
    that is one broken node, not eight findings. The kept finding names the GPU of its cause (None
    when the cause is only ranks that stopped on several GPUs) and lists the other GPUs.
    """
    by_node: dict[str, list[Finding]] = {}
    for f in findings:
        by_node.setdefault(f.node or "", []).append(f)
    out: list[Finding] = []
    for fs in by_node.values():
        crit = [f for f in fs if f.severity == "critical"]
        if len(crit) < 2:
            out += fs
            continue
        out += [f for f in fs if f.severity != "critical"]
        rank_of = {p: i for i, p in enumerate(CAUSE_PRIORITY)}
        keep = min(crit, key=lambda f: (rank_of.get(base_cause(f.cause), len(CAUSE_PRIORITY)), f.start))
        others = [f for f in crit if f is not keep]
        if keep.cause == "ranks_stopped" and len({f.gpu for f in crit}) > 1:
            keep.gpu, keep.rank = None, None
        keep.start = min(f.start for f in crit)
        keep.evidence["also"] = "; ".join(
            f"gpu {f.gpu}: {f.cause}" + (f" (rank {f.rank})" if f.rank is not None else "") for f in others
        )
        keep.evidence["confirmed_at"] = min(f.evidence.get("confirmed_at", "") for f in crit)
        out.append(keep)
    out.sort(key=lambda f: (f.start, f.node or "", f.gpu or ""))
    return out


class FailingNodeDetector(Detector):
    """Hardware that must leave the job: see the module docstring."""

    name = "failing_node"
    kinds = ("failing_node",)

    def detect(self, signals: Signals, prior: Sequence[Finding]) -> Detection:
        """Every failing-node finding of the window: each rule's events, merged per GPU and node."""
        return Detection(findings_of((e for rule in RULES for e in rule(signals)), signals.features))
