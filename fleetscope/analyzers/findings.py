"""The finding: what every detector produces and every consumer (CLI, service, plan) reads.

The JSON shape is the one in docs/design.md#findings; :meth:`Finding.to_dict` writes exactly it.
This module imports only the standard library so the service and the drain planner can use it
without pandas.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# The one time module; re-exported here for the callers that still import them from findings.
from fleetscope.times import parse_rfc3339, rfc3339

#: What makes a finding the same one across analysis cycles: the same problem (kind, cause) in the
#: same place (node, GPU, rank, job). The service keeps a finding's first start by it, and the demo
#: prints a finding once by it (both through :func:`identity`).
IDENTITY_FIELDS = ("kind", "node", "gpu", "rank", "job_id", "cause")


def identity(finding: Finding | Mapping[str, Any]) -> tuple[Any, ...]:
    """A finding's identity (:data:`IDENTITY_FIELDS`), of a :class:`Finding` or of its JSON dict."""
    if isinstance(finding, Finding):
        return tuple(getattr(finding, k) for k in IDENTITY_FIELDS)
    return tuple(finding.get(k) for k in IDENTITY_FIELDS)


@dataclass
class Finding:
    """One thing wrong with the cluster, with the numbers that show it.

    ``kind``: one of ``contract.FINDING_KINDS`` (``failing_node``, ``straggler``, ``mfu_drop``,
    ``job_hang``, and the informational ``monitoring_gap`` / ``membership_change``).
    ``node`` is the ``Hostname``; ``gpu``, ``rank``, ``job_id`` and ``end`` may be None.
    ``start``/``end`` are Unix seconds; ``end`` None means still open.
    ``cause`` is a short snake_case word; ``evidence`` holds the convincing numbers as strings.
    """

    kind: str
    severity: str
    node: str | None
    start: float
    cause: str
    action: str
    gpu: str | None = None
    rank: int | None = None
    job_id: str | None = None
    end: float | None = None
    score: float | None = None
    evidence: dict[str, str] = field(default_factory=dict)

    def key(self) -> tuple:
        """Identity of a finding across analysis cycles (same problem, same place): :func:`identity`."""
        return identity(self)

    def to_dict(self) -> dict[str, Any]:
        """The one JSON shape of a finding: ``analyze --format json``, the service's API and page
        (a score that is not finite is null: JSON has no NaN)."""
        score = None if self.score is None or not math.isfinite(float(self.score)) else self.score
        return {
            "kind": self.kind,
            "severity": self.severity,
            "node": self.node,
            "gpu": None if self.gpu is None else str(self.gpu),
            "rank": None if self.rank is None else int(self.rank),
            "job_id": self.job_id,
            "start": rfc3339(self.start),
            "end": rfc3339(self.end),
            "score": None if score is None else round(float(score), 3),
            "cause": self.cause,
            "evidence": {k: str(v) for k, v in self.evidence.items()},
            "action": self.action,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Finding:
        return cls(
            kind=d["kind"],
            severity=d["severity"],
            node=d.get("node"),
            gpu=d.get("gpu"),
            rank=d.get("rank"),
            job_id=d.get("job_id"),
            start=parse_rfc3339(d["start"]) or 0.0,
            end=parse_rfc3339(d.get("end")),
            score=d.get("score"),
            cause=d.get("cause", "unknown"),
            evidence=dict(d.get("evidence") or {}),
            action=d.get("action", ""),
        )


def findings_document(findings: list[Finding], start: float, end: float) -> dict[str, Any]:
    """The top-level JSON document of ``fleetscope analyze --format json`` (see Report.document)."""
    return {
        "window": {"start": rfc3339(start), "end": rfc3339(end)},
        "findings": [f.to_dict() for f in findings],
    }
