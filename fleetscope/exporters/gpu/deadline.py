"""Run NVML work in a worker thread and wait for it at most a deadline.

A GPU whose driver hangs (GSP timeouts, XID 119) can block an NVML call for minutes; DCGM stops
calling the driver in that state. Here each GPU gets its own worker thread, and a scrape waits for
it at most ``timeout`` seconds. A worker that misses its deadline is abandoned (it is a daemon
thread, so it never blocks shutdown), the GPU is reported lost for that scrape, and until the
abandoned call returns no new work is sent for that GPU: a hung driver costs one stuck thread, not
one per scrape.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class DeadlineExceeded(TimeoutError):
    """The work did not finish before its deadline (the worker was abandoned)."""


class Busy(RuntimeError):
    """An earlier call on this worker is still stuck; no new work is accepted until it returns."""


class _Job:
    __slots__ = ("abandoned", "args", "done", "error", "fn", "result")

    def __init__(self, fn: Callable[..., Any], args: tuple) -> None:
        self.fn = fn
        self.args = args
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        self.abandoned = False


class DeadlineWorker:
    """One long-lived daemon thread that runs submitted jobs in order."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._queue: queue.SimpleQueue[_Job | None] | None = None
        self._thread: threading.Thread | None = None
        self._stuck: _Job | None = None
        self._lock = threading.Lock()

    def _ensure_thread(self) -> queue.SimpleQueue:
        if self._thread is None or not self._thread.is_alive():
            q: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
            self._queue = q
            self._thread = threading.Thread(target=self._loop, args=(q,), name=self.name, daemon=True)
            self._thread.start()
        assert self._queue is not None
        return self._queue

    @staticmethod
    def _loop(q: queue.SimpleQueue) -> None:
        while True:
            job = q.get()
            if job is None:
                return
            try:
                job.result = job.fn(*job.args)
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
                job.error = exc
            job.done.set()
            if job.abandoned:
                return  # a replacement thread serves this worker's later jobs

    @property
    def stuck(self) -> bool:
        """True while an abandoned call has not returned yet."""
        with self._lock:
            if self._stuck is not None and self._stuck.done.is_set():
                self._stuck = None
            return self._stuck is not None

    def submit(self, fn: Callable[..., T], *args: Any) -> _Job:
        if self.stuck:
            raise Busy(f"{self.name}: an earlier call is still stuck")
        job = _Job(fn, args)
        with self._lock:
            self._ensure_thread().put(job)
        return job

    def wait(self, job: _Job, timeout: float) -> Any:
        if not job.done.wait(timeout):
            with self._lock:
                job.abandoned = True
                self._stuck = job
                # The stuck thread exits when (if) its call returns; later jobs get a new thread.
                self._thread = None
                self._queue = None
            raise DeadlineExceeded(f"{self.name}: no answer within {timeout:g}s")
        if job.error is not None:
            raise job.error
        return job.result

    def run(self, timeout: float, fn: Callable[..., T], *args: Any) -> T:
        return self.wait(self.submit(fn, *args), timeout)

    def close(self) -> None:
        with self._lock:
            if self._queue is not None:
                self._queue.put(None)
            self._thread = None
            self._queue = None
