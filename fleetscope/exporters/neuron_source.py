"""Where neuron-monitor's reports come from: a child process we supervise, or a file a sidecar writes.

Both run one reader thread that hands every complete line to a callback and never touches the
scrape: the collector serves whatever the callback last stored.

:class:`Supervisor` starts ``neuron-monitor [-c config]`` and restarts it, with exponential
back-off (1 s doubling to 60 s, back to 1 s after a good report), when it exits, when it prints
nothing for ``hang_after`` seconds (it is killed first), or when it prints ``garbage_limit`` bad
lines in a row. Each restart is logged once, in one line, and counted by reason.

:class:`FileFollower` reads a regular file or a FIFO the way ``tail -F`` does: lines appended are
read as they come, a truncated or replaced file is reopened from its start.
"""

from __future__ import annotations

import logging
import os
import selectors
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

#: A line longer than this is garbage (a report of 64 NeuronCores is about 60 KiB).
MAX_LINE_BYTES = 16 << 20
BACKOFF_MIN_S = 1.0
BACKOFF_MAX_S = 60.0

log = logging.getLogger("fleetscope.exporters.neuron")

#: Called with one line (without its newline); returns True when the line was a good report.
OnLine = Callable[[bytes], bool]


class _Lines:
    """Splits a byte stream into lines, refusing over-long ones."""

    def __init__(self) -> None:
        self.buf = b""

    def feed(self, chunk: bytes) -> tuple[list[bytes], bool]:
        """(complete lines, whether an over-long line was dropped)."""
        self.buf += chunk
        *lines, self.buf = self.buf.split(b"\n")
        too_long = len(self.buf) > MAX_LINE_BYTES
        if too_long:
            self.buf = b""
        return [line for line in lines if line.strip()], too_long


class Supervisor:
    """Runs neuron-monitor as a child process and keeps it running."""

    def __init__(
        self,
        argv: list[str],
        on_line: OnLine,
        hang_after: float = 60.0,
        garbage_limit: int = 3,
    ) -> None:
        self.argv = argv
        self.on_line = on_line
        self.hang_after = hang_after
        self.garbage_limit = garbage_limit
        self.restarts: Counter[str] = Counter()
        self.last_problem = ""
        self._stop = threading.Event()
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="neuron-monitor", daemon=True)
        self._thread.start()

    def _start(self) -> subprocess.Popen[bytes] | None:
        try:
            proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # a signal to the exporter's group does not reach it twice
            )
        except OSError as exc:
            self.last_problem = f"cannot start {self.argv[0]}: {exc.strerror or exc}"
            return None
        with self._lock:
            self._proc = proc
        return proc

    def _run(self) -> None:
        backoff = BACKOFF_MIN_S
        while not self._stop.is_set():
            proc = self._start()
            reason, good = ("exited", False) if proc is None else self._read(proc)
            if proc is not None:
                self._kill(proc)
            if self._stop.is_set():
                return
            if good:
                backoff = BACKOFF_MIN_S
            log.warning("neuron-monitor %s; restarting it in %.0f s", self.last_problem, backoff)
            self.restarts[reason] += 1
            if self._stop.wait(backoff):
                return
            backoff = min(backoff * 2, BACKOFF_MAX_S)

    def _read(self, proc: subprocess.Popen[bytes]) -> tuple[str, bool]:
        """Read until the child exits, hangs or prints garbage: (reason, any good report seen)."""
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        lines, bad, good = _Lines(), 0, False
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            last = time.monotonic()
            while not self._stop.is_set():
                if not sel.select(timeout=min(0.5, self.hang_after)):
                    if time.monotonic() - last > self.hang_after:
                        self.last_problem = f"printed no report for {self.hang_after:g} s (hung)"
                        return "hung", good
                    continue
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    code = proc.wait()
                    self.last_problem = f"exited with status {code}"
                    return "exited", good
                last = time.monotonic()
                complete, too_long = lines.feed(chunk)
                bad += int(too_long)
                for line in complete:
                    if self.on_line(line):
                        bad, good = 0, True
                    else:
                        bad += 1
                if bad >= self.garbage_limit:
                    self.last_problem = f"printed {bad} lines in a row that are no report (garbage)"
                    return "garbage", good
        return "exited", good

    def _kill(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                proc.kill()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            log.warning("neuron-monitor pid %d did not die after SIGKILL", proc.pid)
        if proc.stdout is not None:
            proc.stdout.close()

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            proc = self._proc
        if proc is not None:
            self._kill(proc)
        self._thread.join(timeout=5)


class FileFollower:
    """Follows a file or FIFO that a sidecar (``neuron-monitor > file``) writes."""

    def __init__(self, path: Path, on_line: OnLine, poll_s: float = 0.2) -> None:
        self.path = path
        self.on_line = on_line
        self.poll_s = poll_s
        self.restarts: Counter[str] = Counter()
        self.last_problem = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="neuron-report-file", daemon=True)
        self._thread.start()

    def _open(self) -> int | None:
        try:
            # O_NONBLOCK: opening a FIFO must not wait for its writer.
            return os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            problem = f"report file {self.path}: {exc.strerror or exc}"
            if problem != self.last_problem:
                log.warning("neuron-monitor %s", problem)
            self.last_problem = problem
            return None

    def _run(self) -> None:
        while not self._stop.is_set():
            fd = self._open()
            if fd is None:
                self._stop.wait(1.0)
                continue
            try:
                self._follow(fd)
            finally:
                os.close(fd)

    def _replaced(self, fd: int, pos: int) -> bool:
        try:
            now, mine = os.stat(self.path), os.fstat(fd)
        except OSError:
            return True
        return (now.st_ino, now.st_dev) != (mine.st_ino, mine.st_dev) or now.st_size < pos

    def _follow(self, fd: int) -> None:
        lines, pos = _Lines(), 0
        while not self._stop.is_set():
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                chunk = None
            if chunk:
                pos += len(chunk)
                complete, _ = lines.feed(chunk)
                for line in complete:
                    self.on_line(line)
                continue
            if self._replaced(fd, pos):
                return
            self._stop.wait(self.poll_s)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
