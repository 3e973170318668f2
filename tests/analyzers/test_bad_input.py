"""Bad input gives one clear line on stderr and a non-zero exit, never a traceback."""

from __future__ import annotations

import gzip
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from fleetscope.cli import main
from fleetscope.simulate.record import write_scenario
from fleetscope.simulate.spec import ScenarioSpec
from tests.support.prom import Prometheus, free_port


def _run(args, capsys) -> tuple[int, str]:
    rc = main(["analyze", *args, "--format", "json"])
    err = capsys.readouterr().err.strip()
    return rc, err


def _one_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    out, _ = write_scenario(
        ScenarioSpec(nodes=1, duration_s=300, seed=2), tmp_path_factory.mktemp("rec") / "r.om"
    )
    return out


def test_empty_file(tmp_path, capsys):
    (tmp_path / "e.om").write_bytes(b"")
    rc, err = _run(["--input", str(tmp_path / "e.om")], capsys)
    assert rc == 1 and "is empty" in _one_line(err)


def test_missing_file(tmp_path, capsys):
    rc, err = _run(["--input", str(tmp_path / "nope.om")], capsys)
    assert rc == 1 and "cannot read" in _one_line(err)


def test_truncated_file(recording, tmp_path, capsys):
    data = recording.read_bytes()
    (tmp_path / "t.om").write_bytes(data[: len(data) // 2])
    rc, err = _run(["--input", str(tmp_path / "t.om")], capsys)
    assert rc == 1 and "truncated" in _one_line(err)
    (tmp_path / "t.om.gz").write_bytes(gzip.compress(data)[:5000])
    rc, err = _run(["--input", str(tmp_path / "t.om.gz")], capsys)
    assert rc == 1 and "truncated" in _one_line(err)


@pytest.mark.parametrize("content", [
    b'{"status": "success", "data": {"resultType": "matrix", "result": []}}\n',
    b"time,node,value\n1,a,2\n",
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00",
    b"DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 100\n# EOF\n",
])  # fmt: skip
def test_other_formats(tmp_path, capsys, content):
    (tmp_path / "x.om").write_bytes(content)
    rc, err = _run(["--input", str(tmp_path / "x.om")], capsys)
    line = _one_line(err)
    assert rc == 1 and ("not an OpenMetrics" in line or "timestamp" in line or "not a text" in line), line


def test_window_outside_the_file(recording, capsys):
    rc, err = _run(
        ["--input", str(recording), "--start", "2020-01-01T00:00:00Z", "--end", "2020-01-01T01:00:00Z"],
        capsys,
    )
    assert rc == 1 and "no samples in the requested window" in _one_line(err)


def test_prometheus_down(capsys):
    rc, err = _run(["--prometheus", f"http://127.0.0.1:{free_port()}", "--start=-1h"], capsys)
    assert rc == 1 and "cannot reach Prometheus" in _one_line(err)


class _Answer(BaseHTTPRequestHandler):
    status = 503
    body = b"service unavailable"
    seen: ClassVar[list[dict]] = []

    def do_POST(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(n)
        type(self).seen.append(dict(self.headers))
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json" if self.body.startswith(b"{") else "text/plain")
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *a) -> None:
        pass


def _serve(handler):
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_prometheus_5xx(capsys):
    server = _serve(type("H", (_Answer,), {"status": 503, "body": b"service unavailable"}))
    try:
        rc, err = _run(
            ["--prometheus", f"http://127.0.0.1:{server.server_address[1]}", "--start=-1h"], capsys
        )
    finally:
        server.shutdown()
    assert rc == 1 and "answered 503" in _one_line(err)


@pytest.mark.server
def test_prometheus_window_without_data(tmp_path, capsys):
    with Prometheus(tmp_path / "p") as prom:
        rc, err = _run(["--prometheus", prom.url, "--start=-2h", "--end=-1h"], capsys)
    assert rc == 1 and "no fleetscope series" in _one_line(err)


def test_bad_times_and_config(recording, tmp_path, capsys):
    rc, err = _run(["--prometheus", "http://127.0.0.1:1", "--start", "yesterday"], capsys)
    assert rc == 1 and "not a time" in _one_line(err)
    (tmp_path / "c.yaml").write_text("no_such_threshold: 3\n")
    rc, err = _run(["--input", str(recording), "--config", str(tmp_path / "c.yaml")], capsys)
    assert rc == 1 and "unknown detector settings" in _one_line(err)


def test_sigv4_signs_requests(monkeypatch, capsys):
    """--sigv4 signs every request (Amazon Managed Prometheus); checked by a local HTTP server."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    empty = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}).encode()
    handler = type("S", (_Answer,), {"status": 200, "body": empty, "seen": []})
    server = _serve(handler)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/workspaces/ws-1"
        rc, err = _run(["--prometheus", url, "--start=-10m", "--sigv4", "--region", "us-west-2"], capsys)
    finally:
        server.shutdown()
    assert rc == 1 and "no fleetscope series" in _one_line(err)
    assert handler.seen
    for headers in handler.seen:
        auth = headers.get("Authorization", "")
        assert auth.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/"), auth
        assert "/us-west-2/aps/aws4_request" in auth
        assert headers.get("X-Amz-Date")
