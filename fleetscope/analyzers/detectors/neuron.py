"""Neuron evidence (AWS Trainium, Inferentia): failing nodes and slow nodes from neuron-monitor series.

Reasoning. neuron-monitor reports per Neuron device the ECC events it could not correct and per
Neuron application the executions that failed for a hardware fault (docs/neuron.md); either means
the device lost data and the job will fail on it again, so the node is drained, as for a GPU's
double-bit ECC error. A device that the node no longer lists (``fleetscope_neuron_devices`` below
the most the node listed in the window) has fallen off the bus or out of the driver: also
fail-stop. One finding per node, with the most specific cause (``ecc_uncorrectable`` >
``device_missing`` > ``hardware_error``); when the failing-node detector already judged the node
failing, the Neuron evidence is added to its finding instead, and replaces its cause when that
only says where the job broke (``ranks_stopped``), not why.

A node whose executions take longer than its peers' (``execution_latency_seconds`` p50, the
Neuron Runtime's own timing of each compiled graph, above ``neuron_latency_ratio`` times the median
of the other nodes with the same instance type, for the persistence) slows a synchronous job: a
node-level straggler (``slow_execution``). It names no core: the latency is the application's,
per node. Training ranks on Trainium are still compared by the straggler detector, which runs next.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import numpy as np

from fleetscope import contract as c
from fleetscope.analyzers.detectors.base import Detection, Detector
from fleetscope.analyzers.features import Features, fmt_time
from fleetscope.analyzers.findings import Finding
from fleetscope.analyzers.signals.window_signals import Signals
from fleetscope.window.frames import increase_steps, iter_runs

#: The percentile compared (the median execution: robust to one slow batch).
LATENCY_PERCENTILE = "p50"

#: add(node, cause, grid index, evidence key, evidence text): one signal of a failing node.
AddEvent = Callable[[str, str, int, str, str], None]

_PRIORITY = ("ecc_uncorrectable", "device_missing", "hardware_error")
#: Failing-node causes that locate a failure without explaining it; Neuron evidence replaces them.
_GENERIC = frozenset({"ranks_stopped", "node_down"})
_ACTIONS = {
    "ecc_uncorrectable": "drain the node; restart the job elsewhere from its last checkpoint; stop and start "
    "the instance onto a new host, or open an AWS support case if the errors repeat",
    "device_missing": "drain the node; reboot it; if neuron-ls still misses the device, stop and start the "
    "instance onto a new host",
    "hardware_error": "drain the node; check hardware_ecc_events_total and dmesg for the device; replace the "
    "instance if the errors repeat after a stop/start",
    "slow_execution": "compare the node's neuroncore_utilization_ratio and execution latency with its peers; "
    "drain it after the job's next checkpoint if it stays slow",
}


def _first(mask: np.ndarray) -> int | None:
    idx = np.nonzero(mask)[0]
    return int(idx[0]) if idx.size else None


def _events(v: np.ndarray) -> np.ndarray:
    """Grid times where a counter increased (or started above zero inside the window)."""
    hit = increase_steps(v[:, None])[:, 0] > 0
    first = _first(~np.isnan(v))
    if first is not None and first > 0 and v[first] > 0:
        hit[first] = True
    return hit


class NeuronDetector(Detector):
    """Failing and slow Neuron nodes: see the module docstring."""

    name = "neuron"
    kinds = ("failing_node", "straggler")

    def detect(self, signals: Signals, prior: Sequence[Finding]) -> Detection:
        feat = signals.features
        events: dict[str, dict[str, tuple[int, str, str]]] = {}

        def add(node: str, cause: str, i: int, key: str, text: str) -> None:
            per = events.setdefault(node, {})
            if cause not in per or i < per[cause][0]:
                per[cause] = (i, key, text)

        _ecc(feat, add)
        _hardware_errors(feat, add)
        _missing_devices(feat, add)
        out = _failing(feat, events, prior)
        failing = {f.node for f in [*prior, *out] if f.kind == "failing_node" and f.severity == "critical"}
        out += [f for f in _slow_nodes(feat) if f.node not in failing]
        return Detection(out)


def _ecc(feat: Features, add: AddEvent) -> None:
    frame = feat.frames.get(c.NEURON_HW_ECC_EVENTS)
    if not len(frame):
        return
    frame = frame.select(event_type=c.NEURON_ECC_UNCORRECTED)
    for j in range(len(frame)):
        i = _first(_events(frame.values[:, j]))
        if i is None:
            continue
        row = frame.labels.iloc[j]
        node, dev, event = (
            str(row[c.NODE_LABEL]),
            str(row.get("neuron_device_index", "")),
            str(row["event_type"]),
        )
        add(
            node,
            "ecc_uncorrectable",
            i,
            f"neuron_device_{dev}",
            f"Neuron device {dev} counted {event} at {fmt_time(feat.times[i])}",
        )


def _hardware_errors(feat: Features, add: AddEvent) -> None:
    frame = feat.frames.get(c.NEURON_EXECUTION_ERRORS)
    if not len(frame):
        return
    frame = frame.select(error_type=c.NEURON_HARDWARE_ERROR_TYPES)
    for j in range(len(frame)):
        i = _first(_events(frame.values[:, j]))
        if i is None:
            continue
        row = frame.labels.iloc[j]
        node, tag = str(row[c.NODE_LABEL]), str(row.get("runtime_tag", ""))
        add(
            node,
            "hardware_error",
            i,
            "execution_errors",
            f"the Neuron application {tag} reported hardware execution errors at {fmt_time(feat.times[i])}",
        )


def _missing_devices(feat: Features, add: AddEvent) -> None:
    frame = feat.frames.get(c.NEURON_DEVICES)
    if not len(frame):
        return
    labels, values = frame.group((c.NODE_LABEL,), "max")
    for j, node in enumerate(labels[c.NODE_LABEL].astype(str)):
        v = values[:, j]
        if not np.isfinite(v).any():
            continue
        most = np.fmax.accumulate(np.where(np.isnan(v), -np.inf, v))
        i = _first(np.isfinite(v) & (v < most))
        if i is None:
            continue
        add(
            node,
            "device_missing",
            i,
            "neuron_devices",
            f"the node listed {v[i]:.0f} Neuron devices at {fmt_time(feat.times[i])}, {most[i]:.0f} before",
        )


def _failing(
    feat: Features, events: dict[str, dict[str, tuple[int, str, str]]], prior: Sequence[Finding]
) -> list[Finding]:
    out = []
    for node, per in events.items():
        evidence = {key: text for _, key, text in sorted(per.values())}
        known = next(
            (f for f in prior if f.kind == "failing_node" and f.node == node and f.severity == "critical"),
            None,
        )
        cause = next(p for p in _PRIORITY if p in per)
        start_i = min(i for i, _, _ in per.values())
        if known is not None:
            known.evidence.update(evidence)
            if known.cause in _GENERIC:
                # Ranks that stopped say where, not why: the Neuron device says why.
                known.evidence.setdefault("training", f"ranks stopped ({known.cause})")
                known.cause, known.action = cause, _ACTIONS[cause]
                known.start = min(known.start, float(feat.times[start_i]))
            continue
        evidence["confirmed_at"] = fmt_time(feat.times[start_i])
        out.append(
            Finding(
                kind="failing_node",
                severity="critical",
                node=node,
                start=float(feat.times[start_i]),
                cause=cause,
                action=_ACTIONS[cause],
                job_id=_job_on(feat, node),
                evidence=evidence,
            )
        )
    return out


def _job_on(feat: Features, node: str) -> str | None:
    keys = feat.ranks.keys
    if not len(keys):
        return None
    jobs = {str(j) for j, n in zip(keys["job_id"], keys[c.NODE_LABEL], strict=True) if str(n) == node}
    return jobs.pop() if len(jobs) == 1 else None


def _node_latency(feat: Features) -> tuple[list[str], list[str], np.ndarray]:
    """(nodes, their instance types, p50 latency per grid time and node)."""
    frame = feat.frames.get(c.NEURON_EXECUTION_LATENCY)
    if not len(frame):
        return [], [], np.zeros((len(feat.times), 0))
    frame = frame.select(percentile=LATENCY_PERCENTILE)
    labels, values = frame.group((c.NODE_LABEL, "instance_type"), "max")
    return list(labels[c.NODE_LABEL].astype(str)), list(labels["instance_type"].astype(str)), values


def _slow_nodes(feat: Features) -> list[Finding]:
    nodes, types, lat = _node_latency(feat)
    out: list[Finding] = []
    for j, node in enumerate(nodes):
        peers = [k for k in range(len(nodes)) if k != j and types[k] == types[j]]
        if len(peers) < 2:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            med = np.nanmedian(lat[:, peers], axis=1)
        ratio = lat[:, j] / med
        slow = np.isfinite(ratio) & (ratio > feat.config.neuron_latency_ratio)
        runs = [(a, b) for a, b in iter_runs(slow) if b - a + 1 >= feat.persistence_steps]
        if not runs:
            continue
        a, b = runs[0][0], runs[-1][1]
        score = float(np.nanmedian(ratio[a : b + 1]))
        end = None if b == len(feat.times) - 1 else float(feat.times[b])
        out.append(
            Finding(
                kind="straggler",
                severity="warning",
                node=node,
                start=float(feat.times[a]),
                end=end,
                cause="slow_execution",
                action=_ACTIONS["slow_execution"],
                job_id=_job_on(feat, node),
                score=score,
                evidence={
                    "execution_latency": f"p50 {score:.2f}x the median of {len(peers)} {types[j]} peers "
                    f"from {fmt_time(feat.times[a])}"
                },
            )
        )
    return out
