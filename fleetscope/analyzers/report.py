"""What one analysis returns: findings, node verdicts, straggler scores and job summaries."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import InitVar, asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from fleetscope.analyzers.findings import Finding, findings_document
from fleetscope.times import human_duration, rfc3339

if TYPE_CHECKING:  # numpy/pandas types: the service reads reports without them
    from fleetscope.analyzers.carry import Carry
    from fleetscope.analyzers.features import Features
    from fleetscope.analyzers.signals.window_signals import Signals


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

    See :mod:`fleetscope.analyzers.signals.slowness` for the views (compute, forward, data, host, less wait).
    """

    job_id: str
    rank: int
    node: str
    gpu: str
    score: float


@dataclass
class JobStateSpan:
    """One stretch of a job's state in the window: ``running``, ``stalled`` (from the first grid
    time without a step) or ``down`` (no rank reports), from ``start`` to ``end`` (None: to the
    window's end). The same account the live page's job state reads
    (:meth:`~fleetscope.analyzers.signals.window_signals.Signals.job_states`)."""

    state: str
    start: float
    end: float | None = None


@dataclass
class JobSummary:
    job_id: str
    ranks: int = 0
    nodes: list[str] = field(default_factory=list)
    #: The last level measured in the window (while the job is stalled or down: before that).
    mfu: float | None = None
    tokens_per_second: float | None = None
    step_seconds: float | None = None
    stragglers: list[int] = field(default_factory=list)
    #: The job's state at the window's end (``running``, ``stalled``, ``down``; None: unknown).
    state: str | None = None
    #: When that state began, for ``stalled`` and ``down``.
    since: float | None = None
    #: The job's states over the window, in time order.
    states: list[JobStateSpan] = field(default_factory=list)


def job_state_text(j: JobSummary, clock: Callable[[float], str], end: float) -> str:
    """``stalled since 10:01:30 (5.0 min)``, ``down since ...``, ``running``: as the live page says it."""
    if j.state in ("stalled", "down") and j.since is not None:
        return f"{j.state} since {clock(j.since)} ({human_duration(end - j.since)})"
    return j.state or "unknown"


def job_states_text(j: JobSummary, clock: Callable[[float], str], end: float) -> str:
    """``running 10:00:00-10:01:30, stalled 10:01:30-10:06:30 (5.0 min), running 10:06:30-end``."""
    parts = []
    for s in j.states:
        until = end if s.end is None else s.end
        length = f" ({human_duration(until - s.start)})" if s.state != "running" else ""
        parts.append(f"{s.state} {clock(s.start)}-{'end' if s.end is None else clock(s.end)}{length}")
    return ", ".join(parts)


def job_to_dict(j: JobSummary) -> dict[str, Any]:
    """The JSON shape of a job's summary in ``analyze --format json`` (``jobs``)."""
    return {
        "job_id": j.job_id,
        "state": j.state,
        "since": rfc3339(j.since),
        "states": [{"state": s.state, "start": rfc3339(s.start), "end": rfc3339(s.end)} for s in j.states],
        "ranks": j.ranks,
        "nodes": list(j.nodes),
        "mfu": j.mfu,
        "tokens_per_second": j.tokens_per_second,
        "step_seconds": j.step_seconds,
        "stragglers": list(j.stragglers),
    }


@dataclass
class BadputItem:
    """One line of a job's badput: GPU-seconds of one category lost to one cause, in one period.

    ``finding`` names the finding the loss is attributed to (``kind cause on node gpu``), None when
    no finding explains it (a checkpoint, an evaluation, a restart no detector saw).
    """

    category: str
    gpu_seconds: float
    start: float | None = None
    end: float | None = None
    finding: str | None = None
    text: str = ""


@dataclass
class CheckpointAdvice:
    """The checkpoint interval that minimises the expected loss (docs/analyzers.md#goodput).

    Times in seconds; intervals are wall time between the starts of two checkpoints. ``waste_*``
    are the expected fractions of the job's GPU time lost to checkpoints and recomputation.
    ``prior``: no failure in the window, the advice rests on the prior (analyzer config
    ``failure_prior_node_days``, default one per 250 node-days; ``failures_per_node_hour`` is it).

    One shape for the report's JSON, the service's schema (``/api/v1/goodput``) and the page.
    """

    save_s: float
    saves: int
    nodes: int
    failures: int
    node_hours: float
    failures_per_node_hour: float
    prior: bool
    mtbf_s: float
    young_s: float
    daly_s: float
    recommended_s: float
    current_s: float | None = None
    waste_current: float | None = None
    waste_recommended: float = 0.0
    #: GPU-hours per day of the job's allocation the recommended interval saves against the current.
    gain_gpu_hours_per_day: float | None = None


@dataclass
class GoodputAccount:
    """Where one job's GPU-hours went in the window: the parts of :data:`GOODPUT_CATEGORIES`
    (GPU-seconds) sum to ``whole_gpu_seconds`` exactly (``idle`` is the unexplained remainder)."""

    job_id: str
    start: float
    end: float
    gpus: float
    whole_gpu_seconds: float
    gpu_seconds: dict[str, float] = field(default_factory=dict)
    #: Meta's Llama 3 effective training time: time in steps that advanced the model / elapsed.
    effective_training_ratio: float = 0.0
    #: Productive share: effective training time without the slowdown lost to stragglers and MFU drops.
    goodput_ratio: float = 0.0
    baseline_step_s: float | None = None
    restarts: int = 0
    #: Which inputs the account used: ``checkpoint_telemetry``, ``global_step`` (True when read,
    #: False when inferred from phase times and step counters).
    inputs: dict[str, bool] = field(default_factory=dict)
    items: list[BadputItem] = field(default_factory=list)
    advice: CheckpointAdvice | None = None


def goodput_to_dict(a: GoodputAccount) -> dict[str, Any]:
    """The JSON shape of one account (docs/analyzers.md#goodput): GPU-hours, rounded to 4 places."""
    hours = {k: round(v / 3600.0, 4) for k, v in a.gpu_seconds.items()}
    return {
        "job_id": a.job_id,
        "start": rfc3339(a.start),
        "end": rfc3339(a.end),
        "gpus": round(a.gpus, 2),
        "whole_gpu_hours": round(a.whole_gpu_seconds / 3600.0, 4),
        "gpu_hours": hours,
        "gpu_seconds": {k: round(v, 3) for k, v in a.gpu_seconds.items()},
        "effective_training_ratio": round(a.effective_training_ratio, 4),
        "goodput_ratio": round(a.goodput_ratio, 4),
        "baseline_step_seconds": a.baseline_step_s,
        "restarts": a.restarts,
        "inputs": dict(a.inputs),
        "badput": [
            {
                "category": i.category,
                "gpu_hours": round(i.gpu_seconds / 3600.0, 4),
                "start": rfc3339(i.start),
                "end": rfc3339(i.end),
                "finding": i.finding,
                "text": i.text,
            }
            for i in a.items
        ],
        "checkpoint_advice": None if a.advice is None else asdict(a.advice),
    }


#: The account's categories, in report order.
GOODPUT_CATEGORIES: tuple[str, ...] = (
    "productive", "checkpoint", "recovery", "rework", "stall", "eval", "slowdown", "idle",
)  # fmt: skip


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
    #: Job id -> its goodput account (docs/analyzers.md#goodput).
    goodput: dict[str, GoodputAccount] = field(default_factory=dict)

    #: Given at construction, kept as :attr:`signals` and :attr:`carry` (init-only: not compared,
    #: not in ``asdict``, not carried by ``dataclasses.replace`` unless given again).
    window_signals: InitVar[Signals | None] = None
    next_carry: InitVar[Carry | None] = None

    def __post_init__(self, window_signals: Signals | None, next_carry: Carry | None) -> None:
        #: The signals the detectors read, for reports that plot them (HTML) and the job summaries.
        #: Not a dataclass field (``asdict`` and comparisons ignore it) and not pickled: the live
        #: service gets plain data from its analysis child.
        self.signals: Signals | None = window_signals
        #: What this window hands the next chunk of a streamed window (fleetscope.analyzers.stream).
        self.carry: Carry | None = next_carry

    @property
    def features(self) -> Features | None:
        """The window's aligned series the signals were computed from (None: let go of)."""
        return None if self.signals is None else self.signals.features

    def document(self) -> dict[str, Any]:
        """``fleetscope analyze --format json``: the findings document, each job's state over the
        window and summary, and each job's goodput account."""
        doc = findings_document(self.findings, self.start, self.end)
        if self.jobs:
            doc["jobs"] = {job: job_to_dict(j) for job, j in sorted(self.jobs.items())}
        if self.goodput:
            doc["goodput"] = {job: goodput_to_dict(a) for job, a in sorted(self.goodput.items())}
        return doc

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state["signals"] = None
        return state
