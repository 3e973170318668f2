"""Run fleetscope subcommands (``exporter``, ``serve``) as real processes on free loopback ports."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.prom import free_port, http_get, wait_for

ROOT = Path(__file__).resolve().parents[2]


class FleetscopeProcess:
    """``python -m fleetscope <argv...>`` with its output in a log file; ready when ``ready_path``
    answers one of ``ready_statuses``; stopped (terminate, then kill) on exit."""

    ready_path = "/"
    ready_statuses: tuple[int, ...] = (200,)

    def __init__(
        self, name: str, argv: list[str], port: int, log_dir: Path | None, env: dict[str, str] | None
    ):
        self.name = name
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.argv = [sys.executable, "-m", "fleetscope", *argv]
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
        self.log_path = (log_dir or Path("/tmp")) / f"{name}-{port}.log"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 30) -> FleetscopeProcess:
        self.proc = subprocess.Popen(
            self.argv, stdout=self.log_path.open("wb"), stderr=subprocess.STDOUT, env=self.env, cwd=ROOT
        )

        def up() -> bool:
            if self.proc and self.proc.poll() is not None:
                raise AssertionError(f"fleetscope {self.name} exited {self.proc.returncode}: {self.log()}")
            return http_get(f"{self.url}{self.ready_path}", timeout=1)[0] in self.ready_statuses

        wait_for(up, timeout=timeout, what=f"fleetscope {self.name} {self.ready_path}")
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> int | None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode if self.proc else None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ExporterProcess(FleetscopeProcess):
    """``fleetscope exporter`` (listening is enough: ``/`` answers 200, or 401 behind basic auth)."""

    ready_statuses = (200, 401)

    def __init__(self, *args: str, env: dict[str, str] | None = None, log_dir: Path | None = None) -> None:
        port = free_port()
        super().__init__(
            "exporter", ["exporter", f"--web.listen-address=127.0.0.1:{port}", *args], port, log_dir, env
        )

    def metrics(self) -> str:
        status, body = http_get(f"{self.url}/metrics", timeout=10)
        assert status == 200, f"/metrics answered {status}: {body[:500]!r}"
        return body.decode()
