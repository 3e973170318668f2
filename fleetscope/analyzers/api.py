"""The analyzers' public entry points: what the CLI, the live service and the demo call.

Interface agreed between the analyzers and the service; the bodies are filled by the analyzers.
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
) -> Analysis:
    """Load the window from a Prometheus-compatible API and run every detector.

    Raises :class:`fleetscope.errors.FleetscopeError` when Prometheus is down, answers 5xx, or the
    window holds no data.
    """
    raise NotImplementedError


def analyze_file(path: str | Path, config: object | None = None) -> Analysis:
    """Load a recorded OpenMetrics file (gzip allowed) and run every detector."""
    raise NotImplementedError
