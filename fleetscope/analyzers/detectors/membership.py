"""Membership and monitoring changes: informational, never a failing node.

Reasoning (docs/design.md#membership-and-monitoring-gaps). Schedulers replace nodes (Slurm
``--requeue``, SageMaker HyperPod auto-resume, Kubernetes operators restarting pods elsewhere): the
old host's series end, a new host's begin, and the job carries on. And an exporter that stops being
scraped (``up == 0``, a scrape timeout, a network partition on the monitoring side) removes every
series of its node at once -- the training series too, since the node's exporter serves them --
while the job keeps stepping on every node. Neither is a hardware fault: a node that really fails
stalls or crashes its synchronous job, which the failing-node and hang detectors report.

So when all of a node's series are absent for ``gap_s`` while its job (or, without training
telemetry, the other nodes) keeps going, the node gets one ``info`` finding: ``monitoring_gap``
when its series come back, ``membership_change`` when they end for good or begin mid-window.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fleetscope import contract as c
from fleetscope.analyzers.carry import Carry
from fleetscope.analyzers.detectors.base import Detection, Detector
from fleetscope.analyzers.features import Features, fmt_time
from fleetscope.analyzers.findings import Finding
from fleetscope.analyzers.signals.window_signals import Signals
from fleetscope.window.frames import iter_runs

GAP_ACTION = (
    "check the node's exporter and its scrape (up, scrape_duration_seconds, the target's error in "
    "Prometheus); the job kept training, so the node itself is not suspect"
)
LEFT_ACTION = "none if the scheduler replaced the node on purpose; otherwise check why it left the job"
JOINED_ACTION = "none: a node joined (a spare or a replacement); check it stays healthy"


def _node_presence(feat: Features) -> dict[str, np.ndarray]:
    """Node -> per grid time: any of its GPU or rank series has a sample."""
    T = len(feat.times)
    out: dict[str, np.ndarray] = {}
    gs = feat.gpus
    if len(gs.keys):
        have = ~np.isnan(gs.clock) | ~np.isnan(gs.util)
        for j, node in enumerate(gs.keys[c.NODE_LABEL].to_numpy().astype(str)):
            out[node] = out.get(node, np.zeros(T, dtype=bool)) | have[:, j]
    r = feat.ranks
    if len(r.keys):
        for k, node in enumerate(r.keys[c.NODE_LABEL].to_numpy().astype(str)):
            out[node] = out.get(node, np.zeros(T, dtype=bool)) | r.present[:, k]
    return out


#: (node -> steps per grid time of its ranks, steps per grid time of all ranks); None without ranks.
NodeSteps = tuple[dict[str, np.ndarray], np.ndarray] | None


def _node_steps(feat: Features) -> NodeSteps:
    """Steps per grid time of every node and of all, once per window: the others' = all - a node's."""
    r = feat.ranks
    if not r.steps.size:
        return None
    nodes = r.keys[c.NODE_LABEL].to_numpy().astype(str)
    steps = np.nan_to_num(r.steps)
    return {n: steps[:, nodes == n].sum(axis=1) for n in np.unique(nodes)}, steps.sum(axis=1)


def _others_progress(
    feat: Features, node: str, presence: dict[str, np.ndarray], node_steps: NodeSteps
) -> np.ndarray:
    """Per grid time: the rest of the cluster carries on (its ranks step, or its nodes report)."""
    if node_steps is not None:
        per_node, total = node_steps
        if set(per_node) - {node}:  # other nodes have ranks
            return (total - per_node.get(node, 0.0)) > 1e-9
    others = [p for n, p in presence.items() if n != node]
    return np.any(others, axis=0) if others else np.zeros(len(feat.times), dtype=bool)


class MembershipDetector(Detector):
    """Nodes that leave, join, or go unscraped while the job carries on: see the module docstring."""

    name = "membership"
    kinds = ("monitoring_gap", "membership_change")

    def detect(self, signals: Signals, prior: Sequence[Finding]) -> Detection:
        """One informational finding per monitoring gap, departure or arrival of a node; it learns the
        nodes seen, so a node that reappears after a chunk's edge came back rather than joined."""
        feat = signals.features
        times = feat.times
        T = len(times)
        need = max(2, round(feat.config.gap_s / feat.step))
        presence = _node_presence(feat)
        failing = {f.node for f in prior if f.kind == "failing_node"}
        out: list[Finding] = []
        seen_before = feat.carry.nodes_seen if feat.carry is not None else set()
        learnt = Carry(nodes_seen={n for n, here in presence.items() if here.any()})
        node_steps = _node_steps(feat)
        for node, here in sorted(presence.items()):
            if node in failing or not here.any():
                continue
            progress = _others_progress(feat, node, presence, node_steps)
            idx = np.nonzero(here)[0]
            first, last = int(idx[0]), int(idx[-1])
            for a, b in iter_runs(~here):
                if b - a + 1 < need or not progress[a : b + 1].mean() >= 0.5:
                    continue
                if a > first and b < last:
                    kind, cause, action = "monitoring_gap", "series_absent", GAP_ACTION
                    text = (
                        f"every series absent {fmt_time(times[a])} .. {fmt_time(times[b])} "
                        "while the job kept stepping"
                    )
                elif a > first:
                    kind, cause, action = "membership_change", "node_left", LEFT_ACTION
                    text = f"series ended at {fmt_time(times[a])}; the rest of the job carried on"
                elif a == 0 and b < T - 1:
                    if node in seen_before:  # a streamed window's earlier chunk had it: it came back
                        continue
                    kind, cause, action = "membership_change", "node_joined", JOINED_ACTION
                    text = f"series began at {fmt_time(times[b + 1])} while the job was already running"
                else:
                    continue
                end = None if b >= T - 2 and kind == "membership_change" else float(times[min(b + 1, T - 1)])
                joined = cause == "node_joined"
                start = float(times[b + 1]) if joined else float(times[a])
                out.append(
                    Finding(
                        kind=kind,
                        severity="info",
                        node=node,
                        start=start,
                        end=start if joined else end,
                        cause=cause,
                        # a join is known when the series begins (not from the window's start)
                        evidence={
                            "series": text,
                            "confirmed_at": fmt_time(start if joined else times[min(a + need - 1, T - 1)]),
                        },
                        action=action,
                    )
                )
        return Detection(out, learnt)
