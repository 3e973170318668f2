"""What one analysis returns: findings, node verdicts, straggler scores and job summaries."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fleetscope.analyzers.findings import Finding

if TYPE_CHECKING:  # numpy/pandas types: the service reads reports without them
    from fleetscope.analyzers.features import Features


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
    """A rank's slowness against its peer group: 1 + its largest slowness view (1.0 = like its peers).

    See :mod:`fleetscope.analyzers.slowness` for the views (compute, forward, data, host, less wait).
    """

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
class Report:
    """The result of one analysis over a window [start, end] (Unix seconds).

    Plain data (dataclasses and the standard library), so the live service and the drain planner
    read it without pandas, and it pickles cheaply from the analysis child process.
    """

    start: float
    end: float
    findings: list[Finding] = field(default_factory=list)
    nodes: dict[str, NodeVerdict] = field(default_factory=dict)
    straggler_scores: list[StragglerScore] = field(default_factory=list)
    jobs: dict[str, JobSummary] = field(default_factory=dict)

    def __post_init__(self) -> None:
        #: The signals the detectors read, for reports that plot them (HTML). Not a dataclass field
        #: (``asdict`` and comparisons ignore it) and not pickled: the live service gets plain data
        #: from its analysis child.
        self.features: Features | None = None

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state["features"] = None
        return state
