"""The result of a hang analysis and its JSON contract (docs/hang.md#json).

One :class:`Hang` per culprit set: the process group (or communicator) and collective the other
ranks are blocked in, and ``waiting_for``: the ranks they wait for, never the healthy ranks that
are blocked behind them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Reason = Literal["dead", "not_launched", "mismatch", "launched_not_completed", "unknown"]
Confidence = Literal["high", "medium", "low"]

#: Every reason class, in the order a merged report lists them (most certain cause first).
REASONS: tuple[str, ...] = ("dead", "not_launched", "mismatch", "launched_not_completed", "unknown")
CONFIDENCES: tuple[str, ...] = ("high", "medium", "low")


@dataclass
class RankRef:
    """A rank and, where known, where it ran (RAS ``host``/``pid``/``nvml_dev``, ``training_info``)."""

    #: None only for a process RAS names by node and GPU without its rank (a monitor event)
    rank: int | None
    host: str | None = None
    pid: int | None = None
    gpu: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "host": self.host, "pid": self.pid, "gpu": self.gpu}

    def where(self) -> str:
        """``rank 14 (node X, GPU 6)``: the words a reason uses."""
        parts = [f"node {self.host}"] if self.host else []
        if self.gpu is not None:
            parts.append(f"GPU {self.gpu}")
        who = "a process" if self.rank is None else f"rank {self.rank}"
        if self.rank is None and self.pid is not None:
            who = f"process {self.pid}"
        return who + (f" ({', '.join(parts)})" if parts else "")


def _order(r: RankRef) -> tuple[int, str]:
    return (-1 if r.rank is None else r.rank, r.host or "")


@dataclass
class Hang:
    """One hang (or suspect): the group and op the others are blocked in and whom they wait for."""

    group: str
    op: str
    seq: int | None
    waiting_for: list[RankRef]
    reason: Reason
    confirmed: bool
    confidence: Confidence
    evidence: list[str] = field(default_factory=list)
    #: ``flight_recorder`` or ``nccl_ras``: which input found it.
    source: str = "flight_recorder"
    #: Unix time the hang began where known (the earliest blocked entry, the RAS poll): not in
    #: the JSON, used to say how long before it a hardware event happened.
    since: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "op": self.op,
            "seq": self.seq,
            "waiting_for": [r.to_dict() for r in sorted(self.waiting_for, key=_order)],
            "reason": self.reason,
            "confirmed": self.confirmed,
            "evidence": list(self.evidence),
            "confidence": self.confidence,
            "source": self.source,
        }

    def summary(self) -> str:
        """One line: who, what, which collective."""
        who = ", ".join(r.where() for r in sorted(self.waiting_for, key=_order)) or "no rank named"
        seq = "" if self.seq is None else f" #{self.seq}"
        state = "hang" if self.confirmed else "suspect"
        return f"{state}: {who} -- {self.reason} in {self.op}{seq} of {self.group} ({self.confidence})"


@dataclass
class HangResult:
    """Everything one ``fleetscope hang`` run found, plus what it read and what it could not."""

    hangs: list[Hang] = field(default_factory=list)
    #: What was read: ``flight_recorder`` (dir -> ranks loaded), ``nccl_ras`` (files, polls), ...
    inputs: dict[str, Any] = field(default_factory=dict)
    #: Lines for the reader: unreadable files (one each), what could not be decided.
    notes: list[str] = field(default_factory=list)

    def culprits(self) -> set[int]:
        """Every rank any hang waits for."""
        return {r.rank for h in self.hangs for r in h.waiting_for if r.rank is not None}

    def to_dict(self) -> dict[str, Any]:
        return {
            "hangs": [h.to_dict() for h in self.hangs],
            "inputs": self.inputs,
            "notes": list(self.notes),
        }
