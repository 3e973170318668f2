"""Pydantic models of the API's answers: they document the OpenAPI schema (which schemathesis checks
the answers against). Handlers build the same shapes as plain dicts for speed."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from fleetscope.analyzers.report import CheckpointAdvice

State = Literal["healthy", "degraded", "failing"]


class Freshness(BaseModel):
    ready: bool = Field(description="verdicts exist and are fresh")
    stale: bool = Field(description="the last cycle failed or the verdicts are older than the limit")
    age_seconds: float | None = Field(description="seconds since the verdicts were computed")
    analyzed_at: float | None = Field(description="Unix time of the last successful analysis")
    last_error: str | None = Field(description="why the last cycle failed, if it did")
    failing_since: float | None = Field(description="Unix time the current outage began")
    history_changed_behind_refetch: bool = Field(
        default=False,
        description="the last cycle re-fetched samples that differ from those held at the edge of the "
        "sliding window's re-fetch margin: history may have changed behind it too (raise serve --refetch)",
    )


class Window(BaseModel):
    start: str | None
    end: str | None


class FindingModel(BaseModel):
    kind: str
    severity: str
    node: str | None
    gpu: str | None
    rank: int | None
    job_id: str | None
    start: str | None
    end: str | None
    score: float | None
    cause: str
    evidence: dict[str, str]
    action: str


class FindingsResponse(BaseModel):
    status: Freshness
    window: Window
    findings: list[FindingModel]


class GpuState(BaseModel):
    gpu: str
    state: State


class NodeModel(BaseModel):
    node: str
    state: State
    reasons: list[str]
    gpus: list[GpuState]
    open_findings: int


class NodesResponse(BaseModel):
    status: Freshness
    window: Window
    counts: dict[str, int]
    nodes: list[NodeModel]


class RankScore(BaseModel):
    rank: int
    node: str
    gpu: str
    score: float


class JobHangModel(BaseModel):
    reason: Literal["dead", "not_launched", "mismatch", "launched_not_completed", "unknown"] = Field(
        description="why the collective hangs (docs/hang.md): a dead rank, one that never launched it, ..."
    )
    waiting_for: str | None = Field(description="the ranks it waits for, with their node and GPU (NCCL RAS)")
    node: str | None = Field(description="the culprit's node")
    gpu: str | None = Field(description="the culprit's GPU")
    rank: int | None = Field(description="the culprit rank")
    since: str | None = Field(description="when the hang began")
    drain: bool = Field(description="true when the cause is the node's hardware (plan drains it)")


class JobModel(BaseModel):
    job_id: str
    ranks: int
    nodes: list[str]
    mfu: float | None
    tokens_per_second: float | None
    step_seconds: float | None
    stragglers: list[int]
    state: Literal["running", "stalled", "down", "unknown"] = Field(
        description="running; stalled: ranks report but no step completes; down: ranks stopped reporting"
    )
    since: str | None = Field(description="when the job stalled or went down")
    last_step: str | None = Field(description="when a rank last completed a step")
    mfu_now: float | None = Field(description="MFU at the window's end; null while not measurable")
    mfu_reason: str | None = Field(description="why mfu_now is null")
    last_mfu_at: str | None = Field(description="when mfu (the last level measured) was measured")
    hang: JobHangModel | None = Field(None, description="the job's open hang and its culprit, if any")
    goodput_ratio: float | None = Field(description="productive share of the job's GPU-hours in the window")


class JobsResponse(BaseModel):
    status: Freshness
    window: Window
    jobs: list[JobModel]


class JobResponse(BaseModel):
    status: Freshness
    window: Window
    job: JobModel
    scores: list[RankScore] = Field(description="every rank's straggler score, by rank")
    findings: list[FindingModel]


class ReplicaModel(BaseModel):
    replica: str = Field(description="pod, else host:port")
    node: str = Field(description="the node's name (a pod's from its GPUs, never its IP)")
    stalled_s: float | None = Field(
        None, description="seconds it has had work in flight without generating a token (None: progressing)"
    )
    serving: bool = Field(description="its engine serves its series at the window's end")
    ttft_p95_s: float | None
    itl_mean_s: float | None
    itl_p95_s: float | None
    requests_per_s: float | None
    kv_cache: float | None


class SloModel(BaseModel):
    threshold_s: float | None = Field(description="the latency threshold (None for the error SLO)")
    objective: float
    state: Literal["ok", "burning", "fast burn", "no traffic", "unknown"]
    burn_short: float | None = Field(description="error-budget burn rate over the last 5 minutes")
    burn_window: float | None = Field(description="error-budget burn rate over the analysis window")


class ModelModel(BaseModel):
    model: str
    replicas: list[ReplicaModel]
    serving: int
    ttft_p95_s: float | None = Field(description="the slowest serving replica's TTFT p95")
    itl_mean_s: float | None = Field(description="median of the serving replicas' mean ITL")
    slo: dict[str, SloModel] = Field(description="ttft, itl and errors (HTTP 5xx)")
    findings: list[FindingModel] = Field(description="open findings naming the model or one of its replicas")


class ModelsResponse(BaseModel):
    status: Freshness
    window: Window
    models: list[ModelModel]


class BadputModel(BaseModel):
    category: str
    gpu_hours: float
    start: str | None
    end: str | None
    finding: str | None = Field(description="the finding the loss is attributed to, when one explains it")
    text: str


class GoodputModel(BaseModel):
    job_id: str
    start: str | None
    end: str | None
    gpus: float
    whole_gpu_hours: float
    gpu_hours: dict[str, float] = Field(
        description="productive, checkpoint, recovery, rework, stall, eval, "
        "slowdown, idle: they sum to whole_gpu_hours"
    )
    gpu_seconds: dict[str, float]
    effective_training_ratio: float
    goodput_ratio: float
    baseline_step_seconds: float | None
    restarts: int
    inputs: dict[str, bool]
    badput: list[BadputModel]
    #: The report's own dataclass: one shape for the report, this schema and the page.
    checkpoint_advice: CheckpointAdvice | None


class GoodputResponse(BaseModel):
    status: Freshness
    window: Window
    goodput: GoodputModel


class PlanDrain(BaseModel):
    node: str
    severity: str
    cause: str
    gpus: list[str]
    since: str | None
    action: str
    reason: str
    argv: list[list[str]]
    commands: list[str]


class PlanHeld(BaseModel):
    node: str
    severity: str
    cause: str
    gpus: list[str]
    since: str | None
    action: str
    reason: str


class PlanRejected(BaseModel):
    node: str
    why: str


class PlanModel(BaseModel):
    scheduler: Literal["slurm", "kubernetes"]
    cluster_size: int
    max_fraction: float
    limit: int
    drain: list[PlanDrain]
    held_back: list[PlanHeld]
    rejected: list[PlanRejected]


class PlanResponse(BaseModel):
    status: Freshness
    window: Window
    plan: PlanModel
    script: str


class ShardStatus(BaseModel):
    index: int = Field(description="this replica's shard K (0-based)")
    count: int = Field(description="the shard count N")
    jobs: int | None = Field(description="jobs this shard owned in the last analysis (None before one)")
    models: int | None
    nodes: int | None = Field(description="nodes placed on this shard: it reports their verdicts")
    fetch_nodes: int | None = Field(
        None, description="nodes whose series this shard fetches (its nodes: the fetches are disjoint)"
    )
    bound: int | None = Field(
        None, description="the most nodes any shard is given, ceil(fleet_nodes / count * 1.25)"
    )
    split_jobs: int | None = Field(
        None,
        description="of its jobs, those larger than one shard (their ranks analyzed in slices by the "
        "shards that own their nodes; this one gives their job-level verdicts)",
    )
    fleet_jobs: int | None = Field(description="jobs of the whole fleet in the last analysis")
    fleet_models: int | None
    fleet_nodes: int | None
    discovery: str | None = Field(
        None,
        description="where the last analysis found the fleet's nodes, jobs and models: 'recorded' (the "
        "recording rule Hostname_job_id_model_name:fleetscope_identity:group1m), 'raw' (the identity "
        "series: the store has no such rule), 'recorded+raw' (the rule covers part of the window)",
    )
    text: str = Field(description="'shard K of N, owning X jobs / Y nodes', as the page shows it")


class StatusResponse(BaseModel):
    status: Freshness
    window: Window
    prometheus: str
    interval_seconds: float
    window_seconds: float
    nodes: int
    open_findings: int
    runbooks: str = Field(
        description="where this service serves docs/runbooks.md, relative to its page (``runbooks``: "
        "/runbooks); a finding's section is #<kind>"
    )
    shard: ShardStatus | None = Field(
        None, description="this replica's share of the fleet (--shard); null: it analyzes the whole fleet"
    )


class Health(BaseModel):
    status: Literal["ok"]


class Unavailable(BaseModel):
    detail: str
    status: Freshness


class Problem(BaseModel):
    detail: str
