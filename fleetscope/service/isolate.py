"""Run the analysis in a child process, so it never competes with the HTTP server for the GIL.

Loading and analyzing a 64-node window decodes tens of megabytes of JSON and builds pandas frames:
seconds of pure-Python work that, in a thread, would hold the GIL in long slices and stall the event
loop serving the API. In a separate process the API stays fast during a cycle, the analysis' memory
goes back to the system when it grows, and a crash or an out-of-memory kill of the analysis leaves the
service up (the cycle fails, the verdicts go stale, the next cycle starts a fresh process).
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from fleetscope.analyzers.api import Analysis
from fleetscope.errors import FleetscopeError
from fleetscope.service.runner import AnalyzeFn

log = logging.getLogger(__name__)


class ProcessAnalyze:
    """``ProcessAnalyze(fn)(start, end)`` runs ``fn(start, end)`` in one long-lived child process.

    ``fn`` must be picklable (a module-level function or a :func:`functools.partial` of one).
    """

    def __init__(self, fn: AnalyzeFn) -> None:
        self.fn = fn
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    def _executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                # spawn: the parent runs threads (the event loop, the runner); forking it is unsafe.
                self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
            return self._pool

    def __call__(self, start: float, end: float) -> Analysis:
        pool = self._executor()
        try:
            return pool.submit(self.fn, start, end).result()
        except BrokenProcessPool:
            with self._lock:
                if self._pool is pool:
                    self._pool = None
            pool.shutdown(wait=False, cancel_futures=True)
            raise FleetscopeError(
                "the analysis process died (killed, or out of memory); restarting it"
            ) from None

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
