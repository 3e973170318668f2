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
from fleetscope.simulate.families import SCENARIO_FAMILIES, family_of_scenario

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
#: Fault kinds only the realistic model (every family but ``classic``) injects.
REALISTIC_FAULT_KINDS: tuple[str, ...] = (
    "hang",  # every rank blocked in a collective until the NCCL watchdog aborts (``cause``)
    "fsx_saturation",  # the shared file system is saturated: checkpoints take ``slowdown`` x longer
    "data_slow",  # one node's data loader is slow (its data phase grows)
    "cpu_contention",  # one node's host CPU is contended (host-side optimizer work, data, launches)
    "psu_brake",  # a node's power supply brakes all its GPUs (HW power brake)
    "silent_slowdown",  # one GPU slower with no hardware evidence at all
    "node_drain",  # the scheduler drains the node: clean stop, restart without it or with a spare
    "scrape_gap",  # the node's exporter is not scraped: all its series absent, the job runs on
    # Issue 37: workload patterns that are not faults, and faults with a receive-side or rare sign.
    "moe_imbalance",  # look-alike: a hot MoE expert's GPU slower on some replicas, moving on
    "efa_rx_drops",  # one node's EFA device drops received packets; its senders retransmit a little
    "efa_congestion",  # look-alike: every device retransmits a little (no drops), collectives slower
    "flaky_gpu",  # one GPU slow on about 1 step in ``one_in``, its PCIe replay counter rising
    "random_slow_steps",  # look-alike: 1 step in ``one_in``, a random rank computes slower
)
#: Fault kinds only the inference family injects (beside thermal_throttle, power_brake, gpu_lost).
INFERENCE_FAULT_KINDS: tuple[str, ...] = (
    "kv_pressure",  # one replica's KV cache holds 1 - slowdown of its tokens: preemptions, queueing
    "traffic_surge",  # every replica gets 1 + slowdown times the traffic: the fleet saturates
    "long_prompts",  # look-alike: one replica gets 1 + slowdown times longer prompts (no fault)
    "engine_wedged",  # one replica's engine core stops: its series freeze, requests in flight, GPUs 0%
    "tp_hang",  # one replica's tensor-parallel all-reduce hangs: the same freeze, GPUs spin at 100%
    "http_errors",  # one replica's API server answers every request 5xx before the engine sees it
    "router_starved",  # look-alike: the router stops sending one replica requests (idle, not wedged)
    "rolling_restart",  # look-alike: every replica restarts in turn (stall_s down each, a new pod)
)
#: Fault kinds only the neuron family (Trainium2 nodes, ``fleetscope/simulate/neuron.py``) injects.
NEURON_FAULT_KINDS: tuple[str, ...] = ("neuron_ecc", "neuron_device_lost", "neuron_slow")
#: Realistic kinds that make sense on a Trainium node too.
NEURON_SHARED_KINDS: frozenset[str] = frozenset({"efa_degraded", "data_slow", "node_drain", "scrape_gap"})
#: NeuronCores per Trainium2 device.
CORES_PER_DEVICE = 4
#: Root causes of a ``hang``.
HANG_CAUSES: tuple[str, ...] = ("efa", "xid79", "gpu_vanish", "host")
#: Scenario families (``family`` field, else the file name's prefix; anything else is ``classic``),
#: each run by one simulator family of :data:`fleetscope.simulate.families.FAMILIES`.
FAMILIES: tuple[str, ...] = SCENARIO_FAMILIES
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
    #: Realistic model: an on/off fault is on for ``on_s`` at the start of every ``period_s``.
    period_s: float | None = None
    on_s: float | None = None
    #: hang: its root cause (:data:`HANG_CAUSES`); the hang starts ``lead_s`` after ``at_s`` (the
    #: hardware precursor, e.g. EFA retransmit timeouts, starts at ``at_s``).
    cause: str = "host"
    lead_s: float = 0.0
    #: moe_imbalance: how long one expert stays hot before the token distribution moves the hot
    #: spot to another expert, and the share of the replicas (expert-parallel groups) whose batches
    #: route to it meanwhile (at least two).
    move_every_s: float = 240.0
    spread: float = 0.33
    #: efa_rx_drops: the share of its received packets the device drops; efa_congestion: the share
    #: of its sent packets every device of the job retransmits.
    packet_share: float = 0.03
    #: flaky_gpu, random_slow_steps: one step in ``one_in`` is slow (``slowdown`` more compute).
    one_in: int = 8

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS + REALISTIC_FAULT_KINDS + INFERENCE_FAULT_KINDS + NEURON_FAULT_KINDS:
            kinds = ", ".join(
                FAULT_KINDS + REALISTIC_FAULT_KINDS + INFERENCE_FAULT_KINDS + NEURON_FAULT_KINDS
            )
            raise FleetscopeError(f"unknown fault kind {self.kind!r}; one of: {kinds}")
        if self.restart not in ("shrink", "replace", "same", "end"):
            raise FleetscopeError(f"restart must be shrink, replace, same or end, not {self.restart!r}")
        if self.cause not in HANG_CAUSES:
            raise FleetscopeError(f"hang cause must be one of {', '.join(HANG_CAUSES)}, not {self.cause!r}")
        if (self.period_s is None) != (self.on_s is None) or (self.period_s or 1) <= (self.on_s or 0):
            raise FleetscopeError("period_s and on_s go together, with on_s shorter than period_s")
        if self.move_every_s <= 0 or not 0 < self.spread <= 1 or not 0 <= self.packet_share < 1:
            raise FleetscopeError("move_every_s must be positive, spread in (0, 1], packet_share in [0, 1)")
        if self.one_in < 1:
            raise FleetscopeError("one_in must be at least 1")


@dataclass
class JobSpec:
    """One training job of a realistic scenario, on ``nodes`` consecutive nodes from ``first_node``.

    ``step_scale`` scales the step's phase times (a smaller model steps faster); ``mfu`` is the
    healthy MFU the job's FLOP counters imply; ``pipeline_stages`` x ``tensor_parallel`` x
    data-parallel = the job's ranks (one per GPU).
    """

    job_id: str = "4711"
    nodes: int = 0  # 0: every node of the scenario
    first_node: int = 0
    step_scale: float = 1.0
    mfu: float = 0.40
    pipeline_stages: int = 1
    tensor_parallel: int = 8
    #: Mixture-of-experts: ranks per expert-parallel group (Megatron's expert_model_parallel_size,
    #: carved from consecutive data-parallel ranks); 1: a dense model.
    expert_parallel: int = 1
    microbatches: int = 8
    #: Extra compute of the last stage (output layer and loss) and of the first (embedding).
    last_stage_extra: float = 0.25
    first_stage_extra: float = -0.05


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
    #: The scenario family scored together (None: from the file name's prefix, else ``classic``).
    #: Its simulator family (``fleetscope/simulate/families.py``) runs it: ``classic`` the original
    #: model unchanged; the training and neuron families the realistic model
    #: (``fleetscope/simulate/jobs.py``) with the fields below; ``inference`` its vLLM replicas.
    family: str | None = None
    #: Where host-side timers put the fast ranks' wait for the slowest (no CUDA sync): in
    #: ``backward`` (gradient hooks overlap the all-reduce) or at the ``optimizer`` step.
    wait_phase: str = "backward"
    #: Per-step compute jitter (fraction, 1-3% is normal) and the GPUs' spread in speed.
    jitter: float = 0.02
    gpu_spread: float = 0.015
    #: Evaluation every ``eval_every_s`` (0: none) for ``eval_s``; ``eval_phase`` False: the
    #: telemetry reports eval time in no phase at all.
    eval_every_s: float = 0.0
    eval_s: float = 120.0
    eval_phase: bool = True
    #: A GC pause of ``gc_s`` on a random rank, on average every ``gc_every_s`` (0: none).
    gc_every_s: float = 300.0
    gc_s: float = 3.0
    #: Probability that a node's scrape is missing at a sample (all its series absent then).
    scrape_miss: float = 0.003
    #: Emit the parallel layout on ``training_info`` (detectors must infer it when False).
    emit_layout: bool = False
    #: Serve each job's NCCL RAS series from its rank 0's node, as the exporter's ``nccl_ras``
    #: collector does (``fleetscope/simulate/ras.py``).
    nccl_ras: bool = False
    #: The jobs on the cluster (empty: one job on every node, shaped by the fields below).
    jobs: list[JobSpec] = field(default_factory=list)
    pipeline_stages: int = 1
    tensor_parallel: int = 8
    expert_parallel: int = 1
    mfu: float = 0.40
    #: Inference family: GPUs per vLLM replica (0: one replica per node), the model served, and the
    #: length of the compressed day its traffic follows (0: the scenario's duration).
    gpus_per_replica: int = 0
    served_model: str = "meta-llama/Llama-3.1-70B-Instruct"
    day_s: float = 0.0

    @property
    def realistic(self) -> bool:
        """True when the spec runs the realistic model (every family but ``classic``)."""
        return self.family != "classic"

    def job_on(self, node: int) -> JobSpec | None:
        """The job of :attr:`jobs` that runs on ``node`` at the start (None: no listed job does, so
        the one job shaped by the spec's own fields)."""
        for j in self.jobs:
            if j.first_node <= node < j.first_node + (j.nodes or self.nodes):
                return j
        return None

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.gpus_per_node < 1:
            raise FleetscopeError("a cluster needs at least one node with one GPU")
        if self.step_s <= 0 or self.duration_s < self.step_s:
            raise FleetscopeError("duration must be at least one step, and the step positive")
        self.family = self.family or family_of(self.name)
        simulator_family = family_of_scenario(self.family)
        if self.wait_phase not in ("backward", "optimizer"):
            raise FleetscopeError(f"wait_phase must be backward or optimizer, not {self.wait_phase!r}")
        self.faults = [f if isinstance(f, FaultSpec) else FaultSpec(**f) for f in self.faults]
        self.faults = [f for f in self.faults if f.kind != "healthy"]
        self.jobs = [j if isinstance(j, JobSpec) else JobSpec(**j) for j in self.jobs]
        simulator_family.check_spec(self)
        for j in self.jobs:
            if j.first_node + max(j.nodes, 1) > self.nodes:
                raise FleetscopeError(f"job {j.job_id} runs on nodes outside 0..{self.nodes - 1}")
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
        try:
            return cls(**data)
        except (TypeError, ValueError, AttributeError) as exc:
            # A field of the wrong type (null nodes, a fault that is not a mapping): one clear line.
            raise FleetscopeError(
                f"scenario {data.get('name', '')!r} has a field of the wrong type: {exc}"
            ) from None

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


def family_of(name: str) -> str:
    """The family a spec's name (its file name) starts with, e.g. ``hang_8n_s3`` -> ``hang``."""
    for fam in sorted(FAMILIES, key=len, reverse=True):
        if name == fam or name.startswith(fam + "_"):
            return fam
    return "classic"


def node_name(index: int) -> str:
    """The Hostname of virtual node ``index`` (EC2-style private DNS names)."""
    return f"ip-10-1-{index // 200}-{index % 200 + 10}"


def check_no_inference_faults(spec: ScenarioSpec) -> None:
    """Every family but ``inference``: its fault kinds are not injected here."""
    if any(f.kind in INFERENCE_FAULT_KINDS for f in spec.faults):
        kinds = sorted({f.kind for f in spec.faults if f.kind in INFERENCE_FAULT_KINDS})
        raise FleetscopeError(f"{', '.join(kinds)}: only for the inference family")
