"""The analyzers' public entry points: what the CLI, the live service and the demo call.

Interface agreed between the analyzers and the service.
Everything returned is plain data (dataclasses), so the service needs no pandas types.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from fleetscope.analyzers.findings import Finding


@dataclass
class NodeVerdict:
    """One node's state and why. ``state`` is one of contract.NODE_STATES."""

    node: str
    state: str = "healthy"
    reasons: list[str] = field(default_factory=list)
    #: GPU index (string, as the ``gpu`` label) -> state, for every GPU seen on the node.
    gpus: dict[str, str] = field(default_factory=dict)


@dataclass
class StragglerScore:
    """A rank's compute time divided by its peers' median (1.0 = normal)."""

    job_id: str
    rank: int
    node: str
    gpu: str
    score: float


@dataclass
class JobSummary:
    job_id: str
    ranks: int = 0
    nodes: list[str] = field(default_factory=list)
    mfu: float | None = None
    tokens_per_second: float | None = None
    step_seconds: float | None = None
    stragglers: list[int] = field(default_factory=list)


@dataclass
class Analysis:
    """The result of one analysis over a window [start, end] (Unix seconds)."""

    start: float
    end: float
    findings: list[Finding] = field(default_factory=list)
    nodes: dict[str, NodeVerdict] = field(default_factory=dict)
    straggler_scores: list[StragglerScore] = field(default_factory=list)
    jobs: dict[str, JobSummary] = field(default_factory=dict)


def analyze_prometheus(
    url: str,
    start: float,
    end: float,
    step: float = 15.0,
    config: object | None = None,
    timeout: float = 30.0,
    *,
    sigv4_region: str | None = None,
    headers: dict[str, str] | None = None,
    progress: object | None = None,
) -> Analysis:
    """Load the window from a Prometheus-compatible API and run every detector.

    Raises :class:`fleetscope.errors.FleetscopeError` when Prometheus is down, answers 5xx, or the
    window holds no data. ``sigv4_region`` signs requests for Amazon Managed Prometheus.
    """
    from fleetscope.analyzers.features import METRICS_USED
    from fleetscope.analyzers.load_prometheus import load_prometheus
    from fleetscope.analyzers.pipeline import run_detectors

    frames = load_prometheus(url, start, end, step, METRICS_USED, timeout=timeout, sigv4_region=sigv4_region,
                             headers=headers, progress=progress)  # type: ignore[arg-type]  # fmt: skip
    return run_detectors(frames, config)[0]  # type: ignore[arg-type]


def analyze_file(
    path: str | Path,
    config: object | None = None,
    *,
    step: float | None = None,
    start: float | None = None,
    end: float | None = None,
    progress: object | None = None,
) -> Analysis:
    """Load a recorded OpenMetrics file (gzip allowed) and run every detector."""
    from fleetscope.analyzers.features import METRICS_USED
    from fleetscope.analyzers.load_file import load_file
    from fleetscope.analyzers.pipeline import run_detectors

    frames = load_file(path, METRICS_USED, step=step, start=start, end=end, progress=progress)  # type: ignore[arg-type]
    return run_detectors(frames, config)[0]  # type: ignore[arg-type]
