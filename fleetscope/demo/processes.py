"""The demo's child processes: started in their own sessions, watched, stopped in reverse order."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetscope.errors import FleetscopeError

log = logging.getLogger(__name__)


def find_binary(names: tuple[str, ...]) -> str | None:
    for name in names:
        path = shutil.which(name) or (f"/usr/bin/{name}" if os.access(f"/usr/bin/{name}", os.X_OK) else None)
        if path:
            return path
    return None


def fleetscope_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "fleetscope", *args]


def _death_signal_setter() -> Callable[[], None] | None:
    """A preexec function making the child receive SIGTERM when the demo dies (Linux only).

    libc is loaded here, in the parent: the child, between fork and exec, only makes the call.
    """
    try:
        import ctypes

        prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return lambda: prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class Child:
    name: str
    proc: subprocess.Popen
    log_path: Path

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


class Stopped(Exception):
    """Ctrl-C or SIGTERM arrived while the demo was still starting."""


@dataclass
class Processes:
    """The demo's child processes; stopped in reverse start order."""

    workdir: Path
    stop: threading.Event = field(default_factory=threading.Event)
    children: list[Child] = field(default_factory=list)

    def start(self, name: str, argv: list[str]) -> Child:
        log_path = self.workdir / f"{name}.log"
        out = log_path.open("wb")
        # Own session: a Ctrl-C in the terminal reaches only the demo, which stops the children in
        # order instead of all of them dying at once.
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self.workdir,
            start_new_session=True,
            preexec_fn=_death_signal_setter(),
        )
        out.close()
        child = Child(name, proc, log_path)
        self.children.append(child)
        log.debug("started %s (pid %d): %s", name, proc.pid, " ".join(argv))
        return child

    def dead(self) -> Child | None:
        return next((c for c in self.children if c.proc.poll() is not None), None)

    def wait_until(self, predicate: Callable[[], Any], timeout: float, what: str) -> Any:
        """Poll ``predicate`` until it is true; a dead child, a stop or the timeout end the wait."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.stop.is_set():
                raise Stopped
            dead = self.dead()
            if dead:
                raise FleetscopeError(f"{dead.name} exited while starting:\n{dead.log_tail()}")
            result = predicate()
            if result:
                return result
            time.sleep(0.2)
        raise FleetscopeError(f"timed out after {timeout:.0f}s waiting for {what}")

    def stop_all(self, timeout: float = 15.0) -> None:
        for child in reversed(self.children):
            if child.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for child in reversed(self.children):
            try:
                child.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.proc.pid, signal.SIGKILL)
                child.proc.wait()
        self.children.clear()


@contextlib.contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """An event set by SIGINT/SIGTERM; the previous handlers come back afterwards."""
    stop = threading.Event()
    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, lambda *_: stop.set())
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
