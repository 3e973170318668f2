"""Ground truth of a realistic scenario: what each injected fault must (or may) produce.

An expectation is ``{kind, cause, node, gpu}`` plus flags the scoring reads
(``fleetscope/analyzers/evaluate.py``):

* ``optional``: allowed, neither required nor a false positive (a job-level MFU drop that one
  node's slowness causes; a slowdown with no hardware evidence; informational findings);
* ``single``: one incident, one finding: a second finding matching it is a false positive (an
  on/off throttle reported once per on period);
* ``node_level``: the cause is the node (PSU, host CPU, data loader, EFA device): a per-GPU finding
  on it does not match (and is a false positive);
* ``job_id``: the job the finding belongs to (several jobs on one cluster).

The truth's ``goodput`` block holds, per job, where its GPU-seconds went in the window as the
simulation spent them (:data:`fleetscope.simulate.jobs.GOODPUT_CATEGORIES`), scored against the
analyzers' goodput account.

Events that are not faults (checkpoints, even slow ones on a saturated file system, evaluation,
GC pauses, scheduler drains, exporter gaps) expect nothing, or an optional ``info`` finding.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fleetscope.simulate.spec import FaultSpec, ScenarioSpec, node_name
from fleetscope.times import rfc3339

#: Per fault kind: (finding kind, cause, scope, required); scope ``gpu``, ``node`` or ``job``.
EXPECT: dict[str, list[tuple[str, str, str, bool]]] = {
    "thermal_throttle": [("straggler", "thermal_throttle", "gpu", True), ("mfu_drop", "straggler", "job", False)],  # noqa: E501
    "power_brake": [("straggler", "power_brake", "gpu", True), ("mfu_drop", "straggler", "job", False)],
    "psu_brake": [("straggler", "power_brake", "node", True), ("mfu_drop", "straggler", "job", False)],
    "silent_slowdown": [("straggler", "unknown", "gpu", False), ("mfu_drop", "straggler", "job", False)],
    "pcie_width_drop": [("failing_node", "pcie_width_drop", "gpu", True)],
    "efa_degraded": [("straggler", "network", "node", True), ("mfu_drop", "network", "job", False)],
    "data_slow": [("straggler", "data_loading", "node", True), ("mfu_drop", "data_loading", "job", False)],
    "cpu_contention": [("straggler", "cpu", "node", True), ("mfu_drop", "cpu", "job", False)],
    "data_stall": [("mfu_drop", "data_loading", "job", True)],
    "fsx_saturation": [],
    "node_drain": [("membership_change", "node_drain", "node", False)],
    "scrape_gap": [("monitoring_gap", "scrape_gap", "node", False)],
    # Issue 37. A hot expert is the job's work, not a fault: nothing (an info finding at most).
    "moe_imbalance": [],
    # The receiving node is the culprit, though its senders are the ones retransmitting.
    "efa_rx_drops": [("straggler", "network", "node", True), ("mfu_drop", "network", "job", False)],
    "efa_congestion": [("mfu_drop", "network", "job", False)],
    # One incident, one finding (``single``), with the GPU's PCIe link as its cause.
    "flaky_gpu": [("straggler", "pcie", "gpu", True), ("mfu_drop", "straggler", "job", False)],
    "random_slow_steps": [],
}  # fmt: skip
#: hang, by root cause: the node (and GPU) to blame, or the job when no hardware is at fault.
HANG_EXPECT: dict[str, list[tuple[str, str, str, bool]]] = {
    "efa": [("failing_node", "network", "node", True)],
    "xid79": [("failing_node", "gpu_lost", "gpu", True)],
    "gpu_vanish": [("failing_node", "gpu_missing", "gpu", True)],
    "host": [("job_hang", "hang", "job", True)],
}
_HANG_EXTRA = [("job_hang", "hang", "job", False), ("mfu_drop", "hang", "job", False)]


#: A family's expectation rules of one fault: (finding kind, cause, scope, required) each.
Rules = Callable[[FaultSpec], list[tuple[str, str, str, bool]]]


def training_rules(f: FaultSpec) -> list[tuple[str, str, str, bool]]:
    """The expectation rules of one fault of the training family (kind, cause, scope, required)."""
    if f.kind != "hang":
        return EXPECT[f.kind]
    rules = HANG_EXPECT[f.cause] + _HANG_EXTRA
    return rules[:1] + rules[2:] if f.cause == "host" else rules


def _job_of(spec: ScenarioSpec, node: int) -> tuple[str, int]:
    """(job id, first node) of the job running on ``node`` at the start."""
    j = spec.job_on(node)
    return (spec.job_id, 0) if j is None else (j.job_id, j.first_node)


def _expected(
    spec: ScenarioSpec, rules: list[tuple[str, str, str, bool]], f: FaultSpec
) -> list[dict[str, Any]]:
    job_id, _ = _job_of(spec, f.node)
    out = []
    for kind, cause, scope, required in rules:
        if kind == "mfu_drop" and not spec.training_telemetry:
            continue
        e: dict[str, Any] = {"kind": kind, "cause": cause}
        if kind == "mfu_drop":
            pass  # job-level, matched on time (and job_id)
        elif scope == "job":
            e["node"] = None
            e["gpu"] = None
        else:
            e["node"] = node_name(f.node)
            e["gpu"] = str(f.gpu) if scope == "gpu" else None
            if scope == "node":
                e["node_level"] = True
        if required:
            e["single"] = True
        else:
            e["optional"] = True
        if spec.jobs:
            e["job_id"] = job_id
        out.append(e)
    return out


def realistic_truth(
    spec: ScenarioSpec, goodput: dict[str, dict[str, float]] | None, rules_of: Rules
) -> dict[str, Any]:
    """The ground truth of a realistic spec (training, inference, neuron: each family its
    ``rules_of``), in the classic truth's layout plus ``family`` and, when the model kept one, the
    simulated ``goodput`` account."""
    end_window = spec.start + (spec.duration_s // spec.step_s) * spec.step_s
    faults = []
    for f in spec.faults:
        onset = spec.start + f.at_s
        if f.kind == "hang":
            hang_start = onset + f.lead_s
            end = hang_start + f.stall_s if f.cause == "host" else None
        else:
            end = None if f.duration_s is None else onset + f.duration_s
        end = None if end is None else min(end, end_window)
        job_id, first = _job_of(spec, f.node)
        rules = rules_of(f)
        per_gpu = any(scope == "gpu" for _, _, scope, _ in rules)
        faults.append(
            {
                "kind": f.kind,
                "cause": f.cause if f.kind == "hang" else None,
                "node": node_name(f.node),
                "gpu": str(f.gpu) if per_gpu else None,
                "rank": (f.node - first) * spec.gpus_per_node + f.gpu if per_gpu else None,
                "job_id": job_id,
                "device": f"rdmap{79 + 16 * f.device}s0"
                if f.kind in ("efa_degraded", "efa_rx_drops") or f.cause == "efa"
                else None,
                "onset": rfc3339(onset),
                "end": rfc3339(end),
                "fail_stop": f.kind == "hang",
                "slowdown": f.slowdown if f.kind in _SLOW else None,
                "expected": _expected(spec, rules, f),
            }
        )
    truth = {
        "scenario": spec.name,
        "family": spec.family,
        "window": {"start": rfc3339(spec.start), "end": rfc3339(end_window)},
        "spec": spec.to_dict(),
        "faults": faults,
    }
    if goodput is not None:
        truth["goodput"] = goodput_block(goodput)
    return truth


def training_truth(spec: ScenarioSpec, goodput: dict[str, dict[str, float]] | None = None) -> dict[str, Any]:
    """The ground truth of a training-family spec."""
    return realistic_truth(spec, goodput, training_rules)


_SLOW = frozenset(
    {
        "thermal_throttle",
        "power_brake",
        "psu_brake",
        "silent_slowdown",
        "efa_degraded",
        "data_slow",
        "cpu_contention",
        "data_stall",
        "fsx_saturation",
        "efa_rx_drops",
        "efa_congestion",
        "flaky_gpu",
        "moe_imbalance",
        "random_slow_steps",
    }
)


def goodput_block(account: dict[str, dict[str, float]]) -> dict[str, Any]:
    """Job id -> ``{"gpu_seconds": {category: GPU-seconds}, "whole_gpu_seconds": total}``."""
    return {
        job: {"gpu_seconds": dict(acct), "whole_gpu_seconds": round(sum(acct.values()), 3)}
        for job, acct in sorted(account.items())
    }
