"""Drain plans: failing-node findings -> the scheduler commands an operator would run.

Slurm: ``scontrol update NodeName=<node> State=DRAIN Reason=<why>`` (running jobs finish, no new job
lands; ``scontrol update NodeName=<node> State=RESUME`` undoes it). Kubernetes: ``kubectl cordon`` and
a ``NoSchedule`` taint that records why (``kubectl uncordon`` and ``kubectl taint ... -`` undo it).
The ``Hostname`` label must be the scheduler's node name (Slurm NodeName, Kubernetes node name).

Safety rules, in this order:

* Nothing runs unless :func:`execute` is called (``--execute`` on the CLI); commands run as argument
  lists, never through a shell. The printed form quotes every argument with :func:`shlex.quote`, and
  its comments hold text from the findings only through :func:`_comment` (one line, printable, no
  way out of the comment), so the script stays safe to paste whatever the findings JSON says.
* A node name that is not a plain host name (letters, digits, ``.``, ``_``, ``-``) is never put into a
  command: label values come from the scrape and cannot be trusted.
* At most ``max(1, floor(max_fraction x cluster size))`` nodes are drained at once (none when
  ``max_fraction`` is 0), so a cluster of any size can drain its first failing node; the worst findings go
  first (severity, then the earliest start) and the rest are listed as held back. A detector that
  suddenly calls half the fleet failing is more likely wrong than the fleet.
"""

from __future__ import annotations

import math
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from fleetscope.analyzers.findings import Finding
from fleetscope.analyzers.report import Report
from fleetscope.errors import FleetscopeError
from fleetscope.times import rfc3339

SCHEDULERS = ("slurm", "kubernetes")
DEFAULT_MAX_FRACTION = 0.1
#: Taint key for Kubernetes; its value is the cause (a valid label value).
TAINT_KEY = "fleetscope.io/failing"
#: Matched with ``fullmatch``: ``$`` alone would let a trailing newline through.
_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")
_SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}
_REASON_MAX = 120


@dataclass
class DrainCandidate:
    node: str
    severity: str
    cause: str
    start: float | None
    gpus: list[str] = field(default_factory=list)
    action: str = ""

    def reason(self) -> str:
        """A short, printable reason for the scheduler (Slurm keeps it in ``sinfo -R``)."""
        gpu = f" gpu {','.join(self.gpus)}" if self.gpus else ""
        since = f" since {rfc3339(self.start)}" if self.start else ""
        text = f"fleetscope: {self.cause}{gpu}{since}"
        text = "".join(c if c.isprintable() else " " for c in text)
        return text[:_REASON_MAX]

    def sort_key(self) -> tuple:
        return (_SEVERITY_RANK.get(self.severity, 3), self.start is None, self.start or 0.0, self.node)

    def to_dict(self) -> dict:
        return {
            "node": self.node,
            "severity": self.severity,
            "cause": self.cause,
            "gpus": self.gpus,
            "since": rfc3339(self.start),
            "action": self.action,
            "reason": self.reason(),
        }


@dataclass
class DrainAction:
    candidate: DrainCandidate
    commands: list[list[str]]

    def shell(self) -> list[str]:
        return [shlex.join(argv) for argv in self.commands]


@dataclass
class DrainPlan:
    scheduler: str
    cluster_size: int
    max_fraction: float
    limit: int
    actions: list[DrainAction] = field(default_factory=list)
    held_back: list[DrainCandidate] = field(default_factory=list)
    rejected: list[tuple[str, str]] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "scheduler": self.scheduler,
            "cluster_size": self.cluster_size,
            "max_fraction": self.max_fraction,
            "limit": self.limit,
            "drain": [
                {**a.candidate.to_dict(), "argv": a.commands, "commands": a.shell()} for a in self.actions
            ],
            "held_back": [c.to_dict() for c in self.held_back],
            "rejected": [{"node": n, "why": why} for n, why in self.rejected],
        }

    def script(self) -> str:
        """The plan as a commented shell script (what ``fleetscope plan`` prints)."""
        n_failing = len(self.actions) + len(self.held_back)
        lines = [
            f"# fleetscope drain plan ({_comment(self.scheduler)}): {n_failing} failing of "
            f"{self.cluster_size} nodes; at most {self.limit} at once (max fraction {self.max_fraction:g})"
        ]
        if not self.actions and not self.held_back:
            lines.append("# nothing to drain")
        for a in self.actions:
            c = a.candidate
            lines.append(_comment(f"# {c.node}: {c.severity} {c.cause}; {c.action or 'drain'}"))
            lines.extend(a.shell())
        for c in self.held_back:
            lines.append(_comment(f"# held back by the limit: {c.node} ({c.severity} {c.cause})"))
        for node, why in self.rejected:
            lines.append(_comment(f"# not drained: {node!r}: {why}"))
        return "\n".join(lines) + "\n"


def _comment(text: str) -> str:
    """``text`` as one shell comment line: every character that is not printable (newlines, carriage
    returns, other line breaks, escapes) becomes ``?``, so nothing after it can become a command."""
    return "".join(ch if ch.isprintable() else "?" for ch in text)


def drain_limit(cluster_size: int, max_fraction: float) -> int:
    """How many nodes may be drained at once: ``floor(max_fraction x cluster_size)``, but at least one
    (a 4-node cluster at the default 0.1 can still drain its first failing node), and none when
    ``max_fraction`` is 0 (plans only list what they would drain) or the cluster is empty."""
    if not 0.0 <= max_fraction <= 1.0:
        raise FleetscopeError(f"max fraction must be in [0, 1], got {max_fraction:g}")
    if cluster_size < 0:
        raise FleetscopeError(f"cluster size must be >= 0, got {cluster_size}")
    if max_fraction == 0.0 or cluster_size == 0:
        return 0
    # The epsilon keeps 0.3 x 10 at 3 despite binary floating point.
    return max(1, math.floor(max_fraction * cluster_size + 1e-9))


def commands_for(scheduler: str, c: DrainCandidate) -> list[list[str]]:
    if scheduler == "slurm":
        return [["scontrol", "update", f"NodeName={c.node}", "State=DRAIN", f"Reason={c.reason()}"]]
    if scheduler == "kubernetes":
        value = re.sub(r"[^A-Za-z0-9._-]", "_", c.cause).strip("._-")[:63] or "unknown"
        return [
            ["kubectl", "cordon", c.node],
            ["kubectl", "taint", "nodes", c.node, f"{TAINT_KEY}={value}:NoSchedule", "--overwrite"],
        ]
    raise FleetscopeError(f"unknown scheduler {scheduler!r}; expected one of {', '.join(SCHEDULERS)}")


def candidates_from(findings: Iterable[Finding], failing_nodes: Iterable[tuple[str, list[str]]] = ()) -> list:
    """One candidate per node from open ``failing_node`` findings (and failing verdicts without one)."""
    by_node: dict[str, DrainCandidate] = {}
    for f in findings:
        if f.kind != "failing_node" or f.end is not None or not f.node:
            continue
        c = by_node.get(f.node)
        if c is None:
            c = by_node[f.node] = DrainCandidate(f.node, f.severity, f.cause, f.start, action=f.action)
        elif _SEVERITY_RANK.get(f.severity, 3) < _SEVERITY_RANK.get(c.severity, 3):
            c.severity, c.cause, c.action = f.severity, f.cause, f.action
        if f.start is not None and (c.start is None or f.start < c.start):
            c.start = f.start
        if f.gpu is not None and str(f.gpu) not in c.gpus:
            c.gpus.append(str(f.gpu))
    for node, reasons in failing_nodes:
        if node not in by_node:
            cause = reasons[0] if reasons else "failing"
            by_node[node] = DrainCandidate(node, "critical", cause, None, action="drain")
    return sorted(by_node.values(), key=DrainCandidate.sort_key)


def build_plan(
    candidates: list[DrainCandidate],
    cluster_size: int,
    scheduler: str = "slurm",
    max_fraction: float = DEFAULT_MAX_FRACTION,
) -> DrainPlan:
    if scheduler not in SCHEDULERS:
        raise FleetscopeError(f"unknown scheduler {scheduler!r}; expected one of {', '.join(SCHEDULERS)}")
    limit = drain_limit(cluster_size, max_fraction)
    plan = DrainPlan(scheduler, cluster_size, max_fraction, limit)
    for c in sorted(candidates, key=DrainCandidate.sort_key):
        if not _NODE_NAME.fullmatch(c.node):
            plan.rejected.append((c.node, "not a plain host name; refusing to put it in a command"))
        elif len(plan.actions) < limit:
            plan.actions.append(DrainAction(c, commands_for(scheduler, c)))
        else:
            plan.held_back.append(c)
    return plan


def plan_from_analysis(
    analysis: Report, scheduler: str = "slurm", max_fraction: float = DEFAULT_MAX_FRACTION
) -> DrainPlan:
    failing = [(v.node, v.reasons) for v in analysis.nodes.values() if v.state == "failing"]
    return build_plan(
        candidates_from(analysis.findings, failing), len(analysis.nodes), scheduler, max_fraction
    )


@dataclass
class CommandResult:
    argv: list[str]
    returncode: int
    output: str


def execute(
    plan: DrainPlan,
    run: Callable[..., subprocess.CompletedProcess] = subprocess.run,
    timeout: float = 60.0,
) -> list[CommandResult]:
    """Run the plan's commands (argument lists, no shell). A node whose first command fails gets no
    further commands; the other nodes still run. Refuses to start if a program is missing."""
    for program in sorted({argv[0] for a in plan.actions for argv in a.commands}):
        if shutil.which(program) is None:
            raise FleetscopeError(f"--execute: {program} not found on PATH; nothing was run")
    results: list[CommandResult] = []
    for action in plan.actions:
        for argv in action.commands:
            try:
                proc = run(argv, shell=False, capture_output=True, text=True, timeout=timeout, check=False)
                result = CommandResult(argv, proc.returncode, (proc.stdout + proc.stderr).strip())
            except (OSError, subprocess.TimeoutExpired) as exc:
                result = CommandResult(argv, -1, str(exc))
            results.append(result)
            if result.returncode != 0:
                break
    return results
