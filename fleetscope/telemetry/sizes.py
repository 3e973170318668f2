"""The size of a checkpoint, measured off the training thread.

A checkpoint directory of thousands of shards on a network file system takes seconds to walk;
``checkpoint(path=dir)`` did it on the training thread, right after the save. :func:`measure_later`
hands the walk to one daemon thread and calls back with the bytes once it is done.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable

log = logging.getLogger("fleetscope.telemetry")


def checkpoint_size(path: str | os.PathLike[str]) -> int | None:
    """Bytes of a checkpoint file, or of the regular files under a checkpoint directory; None if absent."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not os.path.isdir(path):
        return st.st_size
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


class _Walker:
    """One daemon thread that measures paths in turn, started on first use."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[str | os.PathLike[str], Callable[[int], None]]] = (
            queue.SimpleQueue()
        )
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._pending = 0
        self._thread: threading.Thread | None = None

    def submit(self, path: str | os.PathLike[str], done: Callable[[int], None]) -> None:
        with self._lock:
            self._pending += 1
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="fleetscope-checkpoint-size", daemon=True
                )
                self._thread.start()
        self._jobs.put((path, done))

    def _run(self) -> None:
        while True:
            path, done = self._jobs.get()
            try:
                size = checkpoint_size(path)
                if size is not None:
                    done(size)
            except Exception as exc:  # noqa: BLE001 - a size is telemetry: never worth a crash
                log.debug("fleetscope telemetry: checkpoint size of %s unknown: %s", path, exc)
            finally:
                with self._lock:
                    self._pending -= 1
                    self._idle.notify_all()

    def wait(self, timeout: float) -> bool:
        """Wait until every submitted path is measured; False if ``timeout`` passed first."""
        with self._lock:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)


_WALKER = _Walker()


def measure_later(path: str | os.PathLike[str], done: Callable[[int], None]) -> None:
    """Measure ``path`` on the size thread and call ``done(bytes)`` there (not if it is absent)."""
    _WALKER.submit(path, done)


def wait_for_sizes(timeout: float = 5.0) -> bool:
    """Wait for the sizes asked for so far (a monitor closing, a test); False on timeout."""
    return _WALKER.wait(timeout)
