"""Run the analysis in a child process, so it never competes with the HTTP server for the GIL.

Loading and analyzing a 64-node window decodes tens of megabytes of JSON and builds pandas frames:
seconds of pure-Python work that, in a thread, would hold the GIL in long slices and stall the event
loop serving the API. In a separate process the API stays fast during a cycle, and a crash or an
out-of-memory kill of the analysis leaves the service up (the cycle fails, the verdicts go stale, the
next cycle starts a fresh child).

One child, one pipe, no ``multiprocessing`` queues or locks. The child never outlives the service:
``close()`` terminates it (an interrupted analysis loses nothing, the next cycle redoes it), it exits
when the pipe to the parent closes, and a watchdog thread exits it if the parent is killed outright.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import pickle
import threading
import time
from multiprocessing.connection import Connection

from fleetscope.errors import FleetscopeError
from fleetscope.service.live import LiveResult
from fleetscope.service.runner import AnalyzeFn

log = logging.getLogger(__name__)
#: How often the child checks that its parent is still there, and the parent that its child is.
_POLL_S = 0.5


def _exit_with_parent(parent_pid: int) -> None:
    while True:
        time.sleep(_POLL_S)
        if os.getppid() != parent_pid:
            os._exit(0)


def _child_main(conn: Connection, parent_pid: int) -> None:
    """Run the analysis for every (fn, start, end) the parent sends. ``fn`` comes only when it is
    new (else None): the child holds it between calls, so what it keeps (a sliding source's
    window) stays between cycles."""
    threading.Thread(target=_exit_with_parent, args=(parent_pid,), daemon=True).start()
    fn: AnalyzeFn | None = None
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        new, start, end = job
        fn = new if new is not None else fn
        assert fn is not None, "the first job brings the function"
        try:
            answer: tuple = ("ok", fn(start, end))
        except BaseException as exc:  # noqa: BLE001 - every failure goes back as one cycle's error
            answer = ("error", exc)
        try:
            payload = pickle.dumps(answer)
        except Exception as exc:  # noqa: BLE001 - an unpicklable exception or result
            payload = pickle.dumps(("error", FleetscopeError(f"{type(exc).__name__}: {exc}")))
        try:
            conn.send_bytes(payload)
        except (BrokenPipeError, OSError):
            return


class ProcessAnalyze:
    """``ProcessAnalyze(fn)(start, end)`` runs ``fn(start, end)`` in one long-lived child process.

    ``fn`` must be picklable (a module-level function, a :func:`functools.partial` of one, or an
    object such as :class:`~fleetscope.service.live.LiveAnalysis`); it is sent to
    the child with its first call (and again only when :attr:`fn` is replaced), and the child
    keeps it, with its state, between calls.
    """

    def __init__(self, fn: AnalyzeFn) -> None:
        self.fn = fn
        self._ctx = multiprocessing.get_context("spawn")  # the parent runs threads: never fork it
        self._proc: multiprocessing.process.BaseProcess | None = None
        self._conn: Connection | None = None
        self._sent: AnalyzeFn | None = None  # the function the child holds
        self._call_lock = threading.Lock()
        self._closed = threading.Event()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.is_alive() else None

    def _child(self) -> tuple[multiprocessing.process.BaseProcess, Connection]:
        if self._proc is None or not self._proc.is_alive():
            self._discard()
            parent_end, child_end = self._ctx.Pipe(duplex=True)
            proc = self._ctx.Process(
                target=_child_main,
                args=(child_end, os.getpid()),
                name="fleetscope-analysis",
                daemon=True,
            )
            proc.start()
            child_end.close()
            self._proc, self._conn = proc, parent_end
            self._sent = None  # a new child holds no function yet
        assert self._proc is not None and self._conn is not None
        return self._proc, self._conn

    def _discard(self) -> None:
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if conn is not None:
            conn.close()
        if proc is not None:
            if proc.is_alive():
                proc.terminate()
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join(5)

    def __call__(self, start: float, end: float) -> LiveResult:
        with self._call_lock:
            if self._closed.is_set():
                raise FleetscopeError("the service is stopping")
            proc, conn = self._child()
            try:
                fn = self.fn
                conn.send((fn if fn is not self._sent else None, start, end))
                self._sent = fn
                while not conn.poll(_POLL_S):
                    if self._closed.is_set():
                        raise FleetscopeError("the service is stopping")
                    if not proc.is_alive():
                        raise EOFError
                kind, value = pickle.loads(conn.recv_bytes())
            except (EOFError, OSError, BrokenPipeError):
                code = proc.exitcode
                self._discard()
                if self._closed.is_set():
                    raise FleetscopeError("the service is stopping") from None
                raise FleetscopeError(
                    f"the analysis process died (exit code {code}: killed, or out of memory); "
                    "the next cycle starts a new one"
                ) from None
        if kind == "ok":
            return value
        raise value

    def close(self) -> None:
        """Stop the child now, even in the middle of a cycle."""
        self._closed.set()
        proc = self._proc
        if proc is not None and proc.is_alive():
            proc.terminate()
        with self._call_lock:
            self._discard()
