"""serve against slow peers: a trickling Prometheus fails the cycle (reported in /readyz and
/metrics); idle or trickling clients are disconnected; every answer carries the security headers."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest
import uvicorn

from fleetscope import contract
from fleetscope.service.app import ServiceSettings, create_app
from fleetscope.service.middleware import SECURITY_HEADERS
from fleetscope.service.server import server_options
from tests.service.support import ScriptedAnalyze, ServeProcess
from tests.support.exposition import value
from tests.support.slow_peers import trickling_server, wait_until


def _get(url: str, token: str | None = None) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


@pytest.mark.slow
def test_a_trickling_prometheus_fails_the_cycle_in_readyz_and_metrics(tmp_path):
    (tmp_path / "token").write_text("s3cret\n")
    with (
        trickling_server("body", gap_s=0.2) as prom,
        ServeProcess(
            prom,
            "--interval",
            "0.5",
            "--timeout",
            "1",
            "--token-file",
            str(tmp_path / "token"),
            workdir=tmp_path,
        ) as serve,
    ):
        assert wait_until(lambda: json.loads(_get(f"{serve.url}/readyz", "s3cret")[2])["last_error"], 20)
        status, _, body = _get(f"{serve.url}/readyz", "s3cret")
        ready = json.loads(body)
        assert status == 503 and "did not answer within 1 s" in ready["last_error"]
        metrics = _get(f"{serve.url}/metrics", "s3cret")[2].decode()
        assert value(metrics, contract.SERVICE_ANALYSIS_SUCCESS) == 0
        # Answers of every kind carry the security headers: 401, 404, 422, 200, 503.
        for path, token, code in [
            ("/readyz", None, 401),
            ("/nope", "s3cret", 404),
            ("/api/v1/nodes?bogus=1", "s3cret", 422),
            ("/healthz", None, 200),
            ("/readyz", "s3cret", 503),
        ]:
            status, headers, _ = _get(serve.url + path, token)
            lower = {k.lower(): v for k, v in headers.items()}
            assert status == code, (path, status)
            for k, v in SECURITY_HEADERS:
                assert lower.get(k.decode()) == v.decode(), (path, k)


@pytest.fixture
def server():
    """The app on uvicorn with serve's options, but a 1 s head deadline (to keep the test short)."""
    app = create_app(ServiceSettings(run_analysis=False), ScriptedAnalyze())
    sock = socket.create_server(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, **{**server_options(), "timeout_keep_alive": 1}))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    assert wait_until(lambda: server.started, 10)
    yield sock.getsockname()[1]
    server.should_exit = True
    thread.join(10)
    sock.close()


def _closed_within(conn: socket.socket, seconds: float) -> float | None:
    """Seconds until the server closed ``conn`` (None if it did not within ``seconds``)."""
    conn.settimeout(seconds)
    started = time.monotonic()
    try:
        while conn.recv(65536):
            pass
    except TimeoutError:
        return None
    except ConnectionResetError:
        pass
    return time.monotonic() - started


@pytest.mark.slow
def test_idle_and_trickling_clients_are_disconnected(server):
    with socket.create_connection(("127.0.0.1", server)) as idle:
        took = _closed_within(idle, 5)
        assert took is not None and took < 3
    with socket.create_connection(("127.0.0.1", server)) as slow:
        slow.settimeout(0.2)
        started = time.monotonic()
        closed = False
        for b in b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 100:
            try:
                slow.sendall(bytes([b]))
                if slow.recv(1) == b"":
                    closed = True
                    break
            except TimeoutError:
                continue
            except OSError:
                closed = True
                break
        assert closed and time.monotonic() - started < 4
    with socket.create_connection(("127.0.0.1", server)) as kept:
        kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        kept.settimeout(5)
        assert kept.recv(65536).startswith(b"HTTP/1.1 200")
        took = _closed_within(kept, 5)  # idle after its answer: closed by the keep-alive timeout
        assert took is not None and took < 3
