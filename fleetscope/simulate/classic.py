"""The ``classic`` simulator family: the original model (:class:`fleetscope.simulate.model.ClusterModel`
itself), its ground truth and its spec rules.

Classic specs run the model unchanged, seed for seed (its hardware series draw the same random
numbers as ever). Like every family, its training series come from one real ``TrainingMonitor`` per
rank driven on the model's virtual clock through ``fleetscope/simulate/ranks.py``
(``ClusterModel._training_series``): the library's counter rules, never a second copy of them
(docs/simulator.md).
"""

from __future__ import annotations

from typing import Any

from fleetscope.errors import FleetscopeError
from fleetscope.simulate.spec import (
    FAIL_STOP,
    REALISTIC_FAULT_KINDS,
    ScenarioSpec,
    check_no_inference_faults,
    node_name,
)
from fleetscope.times import rfc3339


def check_classic_spec(spec: ScenarioSpec) -> None:
    """Classic specs inject neither the realistic model's faults nor its jobs."""
    check_no_inference_faults(spec)
    extra = sorted({f.kind for f in spec.faults if f.kind in REALISTIC_FAULT_KINDS})
    if extra or spec.jobs:
        raise FleetscopeError(f"{', '.join(extra) or 'jobs'}: only for a realistic family, not classic")


#: Which findings each fault must produce (kind, cause) for the evaluation.
EXPECTED: dict[str, list[tuple[str, str]]] = {
    "thermal_throttle": [("straggler", "thermal_throttle"), ("mfu_drop", "straggler")],
    "power_brake": [("straggler", "power_brake"), ("mfu_drop", "straggler")],
    "gpu_lost": [("failing_node", "gpu_lost"), ("mfu_drop", "failing_node")],
    "ecc_uncorrectable": [("failing_node", "ecc_uncorrectable"), ("mfu_drop", "failing_node")],
    "row_remap_failure": [("failing_node", "row_remap_failure"), ("mfu_drop", "failing_node")],
    "efa_degraded": [("straggler", "network"), ("mfu_drop", "network")],
    "pcie_width_drop": [("failing_node", "pcie_width_drop")],
    "data_stall": [("mfu_drop", "data_loading")],
}


def classic_truth(spec: ScenarioSpec, goodput: dict[str, dict[str, float]] | None = None) -> dict[str, Any]:
    """The faults injected, where and when, and the findings they should produce.

    ``goodput`` is not read: the classic model keeps no goodput account.
    """
    end_window = spec.start + (spec.duration_s // spec.step_s) * spec.step_s
    faults = []
    for f in spec.faults:
        onset = spec.start + f.at_s
        end = None if f.duration_s is None else min(onset + f.duration_s, end_window)
        node = node_name(f.node)
        per_gpu = f.kind not in ("efa_degraded", "data_stall")
        expected = []
        for kind, cause in EXPECTED[f.kind]:
            if kind == "mfu_drop" and not spec.training_telemetry:
                continue  # no FLOPs or tokens without the training library
            e: dict[str, Any] = {"kind": kind, "cause": cause}
            if kind == "mfu_drop" and f.kind in FAIL_STOP:
                # MFU drops measure throughput lost while training; a fail-stop fault stops the
                # job (its hang and failing node are their own findings) and a job that restarts
                # without the node trains at its old MFU: a drop may or may not show.
                e["optional"] = True
            if kind == "mfu_drop" and f.kind in ("thermal_throttle", "power_brake") and f.slowdown < 0.25:
                # One GPU s slower costs the job less than s (the healthy GPUs' own spread already sets
                # the pace a few percent above nominal): below 25% a job-level drop may or may not show.
                e["optional"] = True
            if kind != "mfu_drop":
                e["node"] = node
                e["gpu"] = str(f.gpu) if per_gpu else None
            expected.append(e)
        faults.append(
            {
                "kind": f.kind,
                "node": node,
                "gpu": str(f.gpu) if per_gpu else None,
                "rank": f.node * spec.gpus_per_node + f.gpu if per_gpu else None,
                "device": f"rdmap{79 + 16 * f.device}s0" if f.kind == "efa_degraded" else None,
                "onset": rfc3339(onset),
                "end": rfc3339(end),
                "fail_stop": f.kind
                in ("gpu_lost", "ecc_uncorrectable", "row_remap_failure", "pcie_width_drop"),
                "slowdown": f.slowdown
                if f.kind in ("thermal_throttle", "power_brake", "efa_degraded", "data_stall")
                else None,
                "expected": expected,
            }
        )
    return {
        "scenario": spec.name,
        "family": spec.family,
        "window": {"start": rfc3339(spec.start), "end": rfc3339(end_window)},
        "spec": spec.to_dict(),
        "faults": faults,
    }
