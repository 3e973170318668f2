"""The background analysis loop: every ``interval`` seconds, analyze the last ``window`` seconds.

It runs in a daemon thread so a slow Prometheus never blocks the HTTP server. A failing cycle
(Prometheus down, 5xx, timeout, or any error of the analyzers) keeps the last verdicts and marks them
stale; the outage is logged once when it begins and once when analysis recovers, not every cycle.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from fleetscope.errors import FleetscopeError
from fleetscope.service.live import LiveResult
from fleetscope.service.state import VerdictStore

log = logging.getLogger(__name__)

#: ``analyze(start, end) -> LiveResult`` over Unix seconds; the service's only view of the analyzers
#: (:class:`~fleetscope.service.live.LiveAnalysis`).
AnalyzeFn = Callable[[float, float], LiveResult]


class AnalysisRunner:
    def __init__(
        self,
        store: VerdictStore,
        analyze: AnalyzeFn,
        interval: float,
        window: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.analyze = analyze
        self.interval = float(interval)
        self.window = float(window)
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_once(self) -> bool:
        """One cycle. Returns True when it produced fresh verdicts."""
        end = self._clock()
        t0 = time.monotonic()
        try:
            result = self.analyze(end - self.window, end)
        except Exception as exc:  # any failure must leave the service up
            if self._stop.is_set():
                return False  # interrupted by stop(): not an outage
            duration = time.monotonic() - t0
            reason = str(exc) if isinstance(exc, FleetscopeError) else f"{type(exc).__name__}: {exc}"
            if self.store.record_failure(reason, duration):
                if self.store.snapshot().analysis is None:
                    log.warning("analysis failed (no verdicts yet): %s", reason)
                else:
                    log.warning("analysis failed, serving the last verdicts as stale: %s", reason)
                if not isinstance(exc, FleetscopeError):
                    log.debug("analysis failure", exc_info=True)
            return False
        duration = time.monotonic() - t0
        recovered = self.store.snapshot().error is not None
        self.store.record_success(result, duration)
        if recovered:
            log.warning("analysis recovered after an outage (cycle took %.2fs)", duration)
        log.debug("analysis cycle: %d findings, %.2fs", len(result.report.findings), duration)
        return True

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.run_once()
            # Wait out the rest of the interval; a cycle longer than the interval starts the next at once.
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def start(self) -> None:
        if self._thread and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="fleetscope-analysis", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        # An analysis that can be interrupted (a child process) is stopped first, so the thread
        # waiting on it ends now rather than after the cycle.
        close = getattr(self.analyze, "close", None)
        if callable(close):
            close()
        if self._thread:
            self._thread.join(timeout)
        self._thread = None
