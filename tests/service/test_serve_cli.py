"""``fleetscope serve`` as a real process: bad flags are one clear line; Prometheus unreachable from
the start leaves the service up, not ready, and saying why."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from tests.service.support import ROOT, ServeProcess
from tests.support.prom import free_port, http_get, wait_for

pytestmark = [pytest.mark.server]


def _serve(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fleetscope", "serve", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--prometheus", "ftp://x"], "invalid --prometheus"),
        (["--prometheus", "http://127.0.0.1:9", "--listen", "nonsense"], "invalid --listen"),
        (
            ["--prometheus", "http://127.0.0.1:9", "--token-file", "/nonexistent/token"],
            "cannot read --token-file",
        ),
        (
            ["--prometheus", "http://127.0.0.1:9", "--listen", "127.0.0.1:{busy}"],
            "cannot serve on 127.0.0.1:",
        ),
        (["--prometheus", "http://127.0.0.1:9", "--header", "novalue"], "--header 'novalue': expected K=V"),
        (["--prometheus", "http://127.0.0.1:9", "--config", "/nonexistent.yaml"], "cannot read --config"),
    ],
)
def test_bad_flags_are_one_clear_line(args, message):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        args = [a.format(busy=busy.getsockname()[1]) for a in args]
        res = _serve(*args)
    assert res.returncode == 1, res.stderr
    assert message in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_usage_errors_exit_2():
    res = _serve("--prometheus", "http://127.0.0.1:9", "--interval", "0")
    assert res.returncode == 2 and "must be > 0" in res.stderr
    res = _serve("--prometheus", "http://127.0.0.1:9", "--refetch", "-5")
    assert res.returncode == 2 and "--refetch: must be >= 0" in res.stderr
    for args, message in [
        (["--shard", "3/2"], "invalid shard 3/2: K must be below N"),
        (["--shard", "auto"], "--shard auto needs --shards N"),
        (["--shards", "3"], "--shards is for --shard auto"),
    ]:
        res = _serve(
            "--prometheus", "http://127.0.0.1:9", *args, env={"FLEETSCOPE_SHARDS": "", "HOSTNAME": "fs-1"}
        )
        assert res.returncode == 2 and message in res.stderr, res.stderr
        assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr


def test_prometheus_unreachable_from_the_start(tmp_path):
    dead = f"http://127.0.0.1:{free_port()}"
    token = "tok-" + "x" * 20
    with ServeProcess(dead, "--interval", "0.5", workdir=tmp_path, env={"FLEETSCOPE_TOKEN": token}) as serve:
        auth = {"Authorization": f"Bearer {token}"}

        def not_ready_with_reason():
            status, body = http_get(f"{serve.url}/readyz", headers=auth)
            doc = json.loads(body)
            return status == 503 and doc["last_error"] and doc

        doc = wait_for(not_ready_with_reason, timeout=30, what="/readyz to say why it is not ready")
        assert doc["ready"] is False and doc["analyzed_at"] is None
        assert dead.split("//")[1] in doc["last_error"], doc  # says which Prometheus
        assert http_get(f"{serve.url}/healthz")[0] == 200  # open, and the process is alive
        assert http_get(f"{serve.url}/readyz")[0] == 401  # everything else needs the token
        status, body = http_get(f"{serve.url}/api/v1/findings", headers=auth)
        assert status == 503 and json.loads(body)["detail"] == "no analysis yet"
        assert serve.proc.poll() is None
    assert serve.log().count("analysis failed") == 1, serve.log()  # logged once, not every cycle
