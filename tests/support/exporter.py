"""Run ``fleetscope exporter`` as a real process on a free loopback port."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.prom import free_port, http_get, wait_for


class ExporterProcess:
    def __init__(self, *args: str, env: dict[str, str] | None = None, log_dir: Path | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = [
            sys.executable, "-m", "fleetscope", "exporter",
            f"--web.listen-address=127.0.0.1:{self.port}", *args,
        ]  # fmt: skip
        self.env = {**os.environ, **(env or {})}
        self.log_path = (log_dir or Path("/tmp")) / f"exporter-{self.port}.log"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 30) -> ExporterProcess:
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(self.args, stdout=self._log, stderr=subprocess.STDOUT, env=self.env)

        def up() -> bool:
            if self.proc and self.proc.poll() is not None:
                raise AssertionError(f"exporter exited {self.proc.returncode}: {self.log()}")
            return http_get(f"{self.url}/", timeout=1)[0] in (200, 401)

        wait_for(up, timeout=timeout, what="exporter to listen")
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def metrics(self) -> str:
        status, body = http_get(f"{self.url}/metrics", timeout=10)
        assert status == 200, f"/metrics answered {status}: {body[:500]!r}"
        return body.decode()

    def stop(self) -> int | None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode if self.proc else None

    def __enter__(self) -> ExporterProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
