"""What to simulate: the cluster's shape and the faults to inject (a scenario spec).

A spec is plain data, loadable from JSON or YAML, so the evaluation suite commits specs (a few
hundred bytes each) and regenerates the recordings deterministically from their seeds.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from fleetscope.errors import FleetscopeError

#: Fault kinds the simulator injects (names shared with the service, the demo and the docs).
FAULT_KINDS: tuple[str, ...] = (
    "thermal_throttle",
    "power_brake",
    "gpu_lost",
    "ecc_uncorrectable",
    "row_remap_failure",
    "efa_degraded",
    "pcie_width_drop",
    "data_stall",
    "healthy",
)
#: Fault kinds that stop the job (fail-stop); the others slow it or only warn (fail-slow).
FAIL_STOP: frozenset[str] = frozenset(
    {"gpu_lost", "ecc_uncorrectable", "row_remap_failure", "pcie_width_drop"}
)

#: 2026-11-30T10:00:00Z, the default start of a recording.
DEFAULT_START = 1796032800.0


@dataclass
class FaultSpec:
    """One injected fault. ``at_s`` is seconds after the start; ``duration_s`` None lasts to the end."""

    kind: str
    at_s: float = 600.0
    duration_s: float | None = None
    node: int = 1
    gpu: int = 3
    #: Fail-slow magnitude: the job's (or the GPU's) step time grows by this fraction.
    slowdown: float = 0.2
    #: Fail-stop: how the job comes back, ``shrink`` (without the node) or ``replace`` (a spare node).
    restart: str = "shrink"
    #: Fail-stop: seconds the job hangs before it restarts (NCCL watchdog, scheduler requeue).
    stall_s: float = 240.0
    #: efa_degraded: which EFA device of the node.
    device: int = 0

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise FleetscopeError(f"unknown fault kind {self.kind!r}; one of: {', '.join(FAULT_KINDS)}")
        if self.restart not in ("shrink", "replace"):
            raise FleetscopeError(f"restart must be shrink or replace, not {self.restart!r}")


@dataclass
class ScenarioSpec:
    """A virtual training job on ``nodes`` x ``gpus_per_node`` GPUs, one rank per GPU."""

    name: str = "scenario"
    nodes: int = 4
    gpus_per_node: int = 8
    efa_per_node: int = 4
    duration_s: float = 1800.0
    step_s: float = 15.0
    seed: int = 1
    start: float = DEFAULT_START
    job_id: str = "4711"
    model_name: str = "NVIDIA H100 80GB HBM3"
    checkpoint_every_s: float = 600.0
    checkpoint_s: float = 45.0
    #: False: the job runs without fleetscope.telemetry (no training_* series, hardware only).
    training_telemetry: bool = True
    faults: list[FaultSpec] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.gpus_per_node < 1:
            raise FleetscopeError("a cluster needs at least one node with one GPU")
        if self.step_s <= 0 or self.duration_s < self.step_s:
            raise FleetscopeError("duration must be at least one step, and the step positive")
        self.faults = [f if isinstance(f, FaultSpec) else FaultSpec(**f) for f in self.faults]
        self.faults = [f for f in self.faults if f.kind != "healthy"]
        for f in self.faults:
            if not 0 <= f.node < self.nodes:
                raise FleetscopeError(f"fault node {f.node} outside 0..{self.nodes - 1}")
            if not 0 <= f.gpu < self.gpus_per_node:
                raise FleetscopeError(f"fault gpu {f.gpu} outside 0..{self.gpus_per_node - 1}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScenarioSpec:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise FleetscopeError(f"unknown scenario fields: {', '.join(sorted(unknown))}")
        return cls(**data)

    @classmethod
    def load(cls, path: str | Path) -> ScenarioSpec:
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as exc:
            raise FleetscopeError(f"cannot read scenario {path}: {exc.strerror}") from None
        try:
            if path.suffix in (".yaml", ".yml"):
                import yaml

                data = yaml.safe_load(text)
            else:
                data = json.loads(text)
        except Exception as exc:  # noqa: BLE001 - any parse error is one clear message
            raise FleetscopeError(f"scenario {path} is not valid JSON/YAML: {exc}") from None
        if not isinstance(data, dict):
            raise FleetscopeError(f"scenario {path} must be a mapping")
        data.setdefault("name", path.stem)
        return cls.from_dict(data)


def node_name(index: int) -> str:
    """The Hostname of virtual node ``index`` (EC2-style private DNS names)."""
    return f"ip-10-1-{index // 200}-{index % 200 + 10}"
