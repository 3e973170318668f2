"""Ask PyTorch for a Flight Recorder dump when the training loop stalls (docs/telemetry.md#stall-dump).

PyTorch's ProcessGroupNCCL creates a named pipe ``<TORCH_NCCL_DEBUG_INFO_PIPE_FILE><rank>.pipe``
when that variable is set and Flight Recorder is on (``TORCH_NCCL_TRACE_BUFFER_SIZE`` or
``TORCH_FR_BUFFER_SIZE`` > 0); its watchdog thread reads the pipe and, on any byte, writes the
Flight Recorder dump (``TORCH_NCCL_DEBUG_INFO_TEMP_FILE<rank>``). In a hang no step comes, so the
check cannot ride on the training loop: a daemon thread wakes every few seconds and, once no step
completed for ``after_s`` (planned pauses, checkpoints and evaluations, excepted), writes one byte
to the pipe, once per stall; the next completed step re-arms it. The dump then exists when the
operator arrives, well before the NCCL watchdog's timeout kills the job.

The pipe is opened write-only and non-blocking, without ``O_CREAT``, and written only when it is a
FIFO: no reader, a missing pipe or a regular file at that path cost one log line, never a block.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import threading
from collections.abc import Callable, Mapping

log = logging.getLogger("fleetscope.telemetry")

PIPE_ENV = "TORCH_NCCL_DEBUG_INFO_PIPE_FILE"
#: Seconds without a completed step after which the dump is asked for (opt-in).
AFTER_ENV = "FLEETSCOPE_STALL_DUMP_AFTER"


def pipe_path(env: Mapping[str, str], rank: int) -> str | None:
    """PyTorch's dump pipe of ``rank`` (``DumpPipe`` in ProcessGroupNCCL: stem + rank + ``.pipe``)."""
    stem = env.get(PIPE_ENV, "")
    return f"{stem}{rank}.pipe" if stem else None


def poke(path: str) -> str | None:
    """Write one byte to the FIFO at ``path`` without blocking; None when written, else why not."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            return "no process reads the pipe (is Flight Recorder on in this process?)"
        return f"cannot open it: {exc.strerror}"
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return "it is not a named pipe"
        os.write(fd, b"1")
    except OSError as exc:
        return f"cannot write it: {exc.strerror}"
    finally:
        os.close(fd)
    return None


class StallDumper:
    """The watchdog thread. ``last_progress()`` gives the (``now()``) time the last step or pause
    ended; None inside a pause or before the first step (a first step may compile for long)."""

    def __init__(
        self,
        path: str,
        after_s: float,
        last_progress: Callable[[], float | None],
        now: Callable[[], float],
        check_every: float | None = None,
    ) -> None:
        if not after_s > 0:
            raise ValueError(f"stall dump: after_s must be positive, got {after_s}")
        self.path = path
        self.after_s = after_s
        self.last_progress = last_progress
        self.now = now
        self.check_every = check_every if check_every is not None else min(5.0, after_s / 4)
        #: Dumps asked for so far (one per stall).
        self.pokes = 0
        #: The progress time of the stall already dumped (a stall is dumped once).
        self._dumped: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fleetscope-stall-dump", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5.0)

    def check(self) -> bool:
        """One look; True when it asked for a dump now."""
        since = self.last_progress()
        if since is None or since == self._dumped:
            return False
        stalled = self.now() - since
        if stalled < self.after_s:
            return False
        self._dumped = since
        why = poke(self.path)
        if why is not None:
            log.warning("fleetscope telemetry: no step for %.0fs; cannot ask for a dump at %s: %s",
                        stalled, self.path, why)  # fmt: skip
            return False
        self.pokes += 1
        log.warning("fleetscope telemetry: no step for %.0fs; asked PyTorch for a Flight Recorder dump (%s)",
                    stalled, self.path)  # fmt: skip
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.check_every):
            try:
                self.check()
            except Exception as exc:  # noqa: BLE001 - the watchdog must never take training down
                log.warning("fleetscope telemetry: stall check failed: %s", exc)
