"""The verdict store: the latest analysis, when it was made, and whether it is still fresh.

The background runner writes it, the HTTP handlers read it. Every read returns an immutable
:class:`VerdictSnapshot` taken under a lock, so a handler never sees half of one cycle and half of the next.
A failed cycle keeps the last good verdicts and only marks them stale: a node that was failing a
minute ago is still the best guess while Prometheus is unreachable.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from fleetscope.analyzers.findings import Finding
from fleetscope.analyzers.report import Report
from fleetscope.service.live import LiveResult


@dataclass(frozen=True)
class VerdictSnapshot:
    """What the store held at one instant. ``result`` is None before the first success."""

    result: LiveResult | None
    #: Unix time of the last successful analysis (None before the first one).
    analyzed_at: float | None
    #: Unix time of the last attempt, successful or not.
    attempted_at: float | None
    #: Wall time of the last attempt, in seconds.
    duration: float | None
    #: Why the last attempt failed (None when it succeeded).
    error: str | None
    #: Unix time the current run of failures began (None when the last attempt succeeded).
    failing_since: float | None
    #: Seconds after which verdicts count as stale even without a failure.
    stale_after: float
    #: Counter bumped on every successful update; lets readers cache what they derive from it.
    version: int
    now: float

    @property
    def analysis(self) -> Report | None:
        """The last cycle's report (None before the first success)."""
        return None if self.result is None else self.result.report

    @property
    def ready(self) -> bool:
        return self.analysis is not None and not self.stale

    @property
    def age(self) -> float | None:
        """Seconds since the verdicts were computed."""
        return None if self.analyzed_at is None else max(0.0, self.now - self.analyzed_at)

    @property
    def stale(self) -> bool:
        if self.analysis is None:
            return True
        return self.error is not None or (self.age or 0.0) > self.stale_after

    def status(self) -> dict:
        """The freshness block every API answer carries."""
        return {
            "ready": self.ready,
            "stale": self.stale,
            "age_seconds": None if self.age is None else round(self.age, 1),
            "analyzed_at": self.analyzed_at,
            "last_error": self.error,
            "failing_since": self.failing_since,
            "history_changed_behind_refetch": bool(
                self.result is not None and self.result.history_changed_cells
            ),
        }


class VerdictStore:
    """Thread-safe holder of the latest :class:`~fleetscope.service.live.LiveResult` and its freshness."""

    def __init__(self, stale_after: float, clock: Callable[[], float] = time.time) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._stale_after = float(stale_after)
        self._result: LiveResult | None = None
        self._analyzed_at: float | None = None
        self._attempted_at: float | None = None
        self._duration: float | None = None
        self._error: str | None = None
        self._failing_since: float | None = None
        self._version = 0

    def record_success(self, result: LiveResult, duration: float = 0.0) -> None:
        now = self._clock()
        with self._lock:
            previous = self._result
            self._result = _carry_first_seen(previous, result)
            self._analyzed_at = now
            self._attempted_at = now
            self._duration = duration
            self._error = None
            self._failing_since = None
            self._version += 1

    def record_failure(self, error: str, duration: float = 0.0) -> bool:
        """Keep the last verdicts, mark them stale. Returns True if this starts a new outage."""
        now = self._clock()
        with self._lock:
            new_outage = self._error is None
            self._attempted_at = now
            self._duration = duration
            self._error = error
            if new_outage:
                self._failing_since = now
            return new_outage

    def snapshot(self) -> VerdictSnapshot:
        with self._lock:
            return VerdictSnapshot(
                result=self._result,
                analyzed_at=self._analyzed_at,
                attempted_at=self._attempted_at,
                duration=self._duration,
                error=self._error,
                failing_since=self._failing_since,
                stale_after=self._stale_after,
                version=self._version,
                now=self._clock(),
            )


def _carry_first_seen(previous: LiveResult | None, current: LiveResult) -> LiveResult:
    """Keep a finding's earliest start across cycles.

    The window slides, so a problem that began before the window's start would otherwise appear to
    begin at the window's edge every cycle. A finding keeps its first start while it stays in the
    verdicts (same :meth:`Finding.key`); one that disappears and comes back starts afresh.
    """
    if previous is None:
        return current
    earlier: dict[tuple, float] = {}
    for f in previous.report.findings:
        k = f.key()
        earlier[k] = min(f.start, earlier.get(k, f.start))
    findings: list[Finding] = []
    for f in current.report.findings:
        start = earlier.get(f.key())
        findings.append(dataclasses.replace(f, start=start) if start is not None and start < f.start else f)
    return dataclasses.replace(current, report=dataclasses.replace(current.report, findings=findings))
