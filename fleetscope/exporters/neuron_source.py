"""Where neuron-monitor's reports come from: a child process we supervise, or a file a sidecar writes.

Both run one reader thread that hands every complete line to a callback and never touches the
scrape: the collector serves whatever the callback last stored. The thread survives any line (a
callback that raises counts as a bad line) and is started again, after one log line, should its
loop itself ever fail.

:class:`Supervisor` starts ``neuron-monitor [-c config]`` in its own process group, with a
parent-death signal, and restarts it, with exponential back-off (1 s doubling to 60 s, back to 1 s
after a good report), when it exits, when it prints nothing for ``hang_after`` seconds or closes
its output but keeps running (it is killed first), or when it prints ``garbage_limit`` bad lines in
a row. "Nothing" means no complete good report: an endless line, a flood of blank lines or a report
trickled a byte at a time is no progress. On every restart the child's process group is killed, and
so is any process still holding its output pipes (a monitor that daemonized into its own session).
Each restart is logged once, in one line that ends with the last lines neuron-monitor wrote to its
stderr, and counted by reason. Waiting for the child always has a deadline.

:class:`FileFollower` reads a regular file or a FIFO the way ``tail -F`` does: lines appended are
read as they come, a truncated or replaced file is reopened from its start. Anything else (a
directory, ``/dev/urandom``) is refused with one line.
"""

from __future__ import annotations

import ctypes
import logging
import os
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from pathlib import Path

#: A line longer than this is garbage (a report of 64 NeuronCores is about 60 KiB).
MAX_LINE_BYTES = 16 << 20
BACKOFF_MIN_S = 1.0
BACKOFF_MAX_S = 60.0
#: Seconds a freshly started monitor has for its first report, at least (an interpreter's start
#: on a loaded node); later reports are due within ``hang_after``.
STARTUP_GRACE_S = 5.0
#: How long a child that closed its stdout may take to exit before it is killed as hung.
EXIT_WAIT_S = 5.0
#: Where aws-neuron-tools installs neuron-monitor; searched after ``$PATH``.
NEURON_BIN = "/opt/aws/neuron/bin"
#: Lines of neuron-monitor's stderr kept for the log line of a restart, and their length.
STDERR_LINES = 3
STDERR_LINE_CHARS = 200

log = logging.getLogger("fleetscope.exporters.neuron")

#: Called with one line (without its newline); returns True when the line was a good report.
OnLine = Callable[[bytes], bool]


def find_monitor(name: str) -> str:
    """``name`` as given when it is a path, else found on ``$PATH`` or in :data:`NEURON_BIN`."""
    if os.sep in name:
        return name
    search = os.pathsep.join(p for p in (os.environ.get("PATH", ""), NEURON_BIN) if p)
    return shutil.which(name, path=search) or name


class _Lines:
    """Splits a byte stream into lines, refusing over-long ones; linear in the bytes fed."""

    def __init__(self, limit: int = MAX_LINE_BYTES) -> None:
        self.limit = limit
        self.parts: list[bytes] = []
        self.size = 0
        self.dropping = False

    def feed(self, chunk: bytes) -> tuple[list[bytes], bool]:
        """(complete lines, whether an over-long line was dropped)."""
        lines: list[bytes] = []
        too_long = False
        while chunk:
            head, newline, chunk = chunk.partition(b"\n")
            if not self.dropping:
                self.parts.append(head)
                self.size += len(head)
                if self.size > self.limit:
                    too_long, self.dropping = True, True
                    self.parts, self.size = [], 0
            if newline:
                if not self.dropping:
                    line = b"".join(self.parts)
                    if line.strip():
                        lines.append(line)
                self.parts, self.size, self.dropping = [], 0, False
        return lines, too_long


def _libc_prctl() -> Callable[..., int] | None:
    """libc's ``prctl``, looked up in the parent: the child between fork and exec only calls it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _libc_prctl()
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """The child gets SIGKILL when the exporter dies, even by SIGKILL (Linux's PR_SET_PDEATHSIG)."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _guarded(name: str, loop: Callable[[], None], stop: threading.Event) -> None:
    """Run a reader loop; should it raise, say so in one line and run it again a second later."""
    while not stop.is_set():
        try:
            loop()
            return
        except Exception as exc:  # noqa: BLE001 - the reader must outlive anything it reads
            log.warning("%s reader failed (%s: %s); starting it again", name, type(exc).__name__, exc)
            stop.wait(1.0)


def _feed(on_line: OnLine, line: bytes) -> bool:
    """``on_line(line)``; a callback that raises makes the line a bad one, never ends the reader."""
    try:
        return on_line(line)
    except Exception as exc:  # noqa: BLE001
        log.warning("neuron-monitor line not handled (%s: %s)", type(exc).__name__, str(exc)[:200])
        return False


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
        self.stderr: deque[str] = deque(maxlen=STDERR_LINES)
        self._stop = threading.Event()
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(
            target=_guarded,
            args=("neuron-monitor", self._run, self._stop),
            name="neuron-monitor",
            daemon=True,
        )
        self._thread.start()

    def _start(self) -> subprocess.Popen[bytes] | None:
        self.stderr.clear()
        try:
            proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # its own process group: killed whole, with what it forks
                preexec_fn=_die_with_parent,  # one prctl call, resolved before the fork
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
                self._close_pipes(proc)
            if self._stop.is_set():
                return
            if good:
                backoff = BACKOFF_MIN_S
            if self.stderr:
                self.last_problem += "; its stderr ended: " + " | ".join(self.stderr)
            log.warning("neuron-monitor %s; restarting it in %.0f s", self.last_problem, backoff)
            self.restarts[reason] += 1
            if self._stop.wait(backoff):
                return
            backoff = min(backoff * 2, BACKOFF_MAX_S)

    def _read(self, proc: subprocess.Popen[bytes]) -> tuple[str, bool]:
        """Read until the child exits, hangs or prints garbage: (reason, any good report seen)."""
        assert proc.stdout is not None and proc.stderr is not None
        out, err = proc.stdout.fileno(), proc.stderr.fileno()
        lines, err_lines, bad, good = _Lines(), _Lines(64 << 10), 0, False
        with selectors.DefaultSelector() as sel:
            sel.register(out, selectors.EVENT_READ)
            sel.register(err, selectors.EVENT_READ)
            # Progress is a complete good report, not bytes: an endless line, a flood of blank
            # lines or a report trickled a byte at a time keep the pipe busy and report nothing.
            # A fresh process has at least STARTUP_GRACE_S for its first report (its own start).
            last, allowed = time.monotonic(), max(self.hang_after, STARTUP_GRACE_S)
            while not self._stop.is_set():
                ready = sel.select(timeout=min(0.5, self.hang_after))
                if time.monotonic() - last > allowed:
                    self.last_problem = f"printed no report for {allowed:g} s (hung)"
                    return "hung", good
                for key, _ in ready:
                    chunk = os.read(key.fd, 1 << 16)
                    if key.fd == err:
                        if not chunk:
                            sel.unregister(err)
                        for line in err_lines.feed(chunk)[0]:
                            self.stderr.append(line.decode("utf-8", "replace").strip()[:STDERR_LINE_CHARS])
                        continue
                    if not chunk:  # a last line without its newline still counts
                        good = any([_feed(self.on_line, line) for line in lines.feed(b"\n")[0]]) or good
                        return self._ended(proc), good
                    complete, too_long = lines.feed(chunk)
                    bad += int(too_long)
                    for line in complete:
                        if _feed(self.on_line, line):
                            bad, good = 0, True
                            last, allowed = time.monotonic(), self.hang_after
                        else:
                            bad += 1
                    if bad >= self.garbage_limit:
                        self.last_problem = f"printed {bad} lines in a row that are no report (garbage)"
                        return "garbage", good
        return "exited", good

    def _ended(self, proc: subprocess.Popen[bytes]) -> str:
        """The child closed its stdout: its exit status, or ``hung`` when it keeps running."""
        try:
            code = proc.wait(timeout=EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            self.last_problem = f"closed its output but was still running {EXIT_WAIT_S:g} s later (hung)"
            return "hung"
        if proc.stderr is not None:  # what it wrote just before it exited
            try:
                os.set_blocking(proc.stderr.fileno(), False)
                tail = proc.stderr.read(64 << 10) or b""
            except (OSError, ValueError):
                tail = b""
            for line in tail.decode("utf-8", "replace").splitlines():
                if line.strip():
                    self.stderr.append(line.strip()[:STDERR_LINE_CHARS])
        self.last_problem = f"exited with status {code}"
        return "exited"

    def _kill(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL to the child's process group (what it forked too) and to any process that still
        holds its output pipes (one that daemonized into a session of its own), then reap the
        child, with a deadline."""
        pipes = _pipe_inodes(proc)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            if proc.poll() is None:
                proc.kill()
        for pid in _holders(pipes):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            log.warning("neuron-monitor pid %d did not die after SIGKILL", proc.pid)

    @staticmethod
    def _close_pipes(proc: subprocess.Popen[bytes]) -> None:
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            proc = self._proc
        if proc is not None:
            self._kill(proc)  # the reader thread sees the end of its pipes and closes them
        self._thread.join(timeout=5)


def _pipe_inodes(proc: subprocess.Popen[bytes]) -> set[str]:
    """``pipe:[inode]`` of the child's stdout and stderr, as ``/proc/PID/fd`` links name them."""
    out = set()
    for pipe in (proc.stdout, proc.stderr):
        try:
            if pipe is not None and not pipe.closed:
                out.add(f"pipe:[{os.fstat(pipe.fileno()).st_ino}]")
        except (OSError, ValueError):
            pass
    return out


def _holders(pipes: set[str]) -> list[int]:
    """Processes other than this one with one of ``pipes`` open (Linux ``/proc``; else none)."""
    if not pipes:
        return []
    me = os.getpid()
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            fds = os.listdir(f"/proc/{entry}/fd")
        except OSError:  # gone, or not ours to look at (then not ours to kill either)
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{entry}/fd/{fd}") in pipes:
                    found.append(int(entry))
                    break
            except OSError:
                continue
    return found


class FileFollower:
    """Follows a file or FIFO that a sidecar (``neuron-monitor > file``) writes."""

    def __init__(self, path: Path, on_line: OnLine, poll_s: float = 0.2) -> None:
        self.path = path
        self.on_line = on_line
        self.poll_s = poll_s
        self.restarts: Counter[str] = Counter()
        self.last_problem = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=_guarded,
            args=("neuron report file", self._run, self._stop),
            name="neuron-report-file",
            daemon=True,
        )
        self._thread.start()

    def _problem(self, problem: str) -> None:
        if problem != self.last_problem:
            log.warning("neuron-monitor %s", problem)
        self.last_problem = problem

    def _open(self) -> int | None:
        try:
            # O_NONBLOCK: opening a FIFO must not wait for its writer.
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            self._problem(f"report file {self.path}: {exc.strerror or exc}")
            return None
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
            os.close(fd)
            self._problem(f"report file {self.path}: not a regular file or FIFO")
            return None
        return fd

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
                    _feed(self.on_line, line)
                continue
            if self._replaced(fd, pos):
                return
            self._stop.wait(self.poll_s)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
