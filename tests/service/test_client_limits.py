"""serve with 300 idle connections from one address (every API request was 503): that address
holds its share of the connections, the others are answered (issue 26, item 12). Loopback only:
the idle client on 127.0.0.2, the API client on 127.0.0.1."""

from __future__ import annotations

import socket
import threading
import urllib.error
import urllib.request

import uvicorn

from fleetscope.service.app import ServiceSettings, create_app
from fleetscope.service.server import MAX_CONNECTIONS, HeadDeadlineProtocol, server_options
from tests.exporters.test_client_limits import FLOOD_SOURCES, Flood
from tests.service.support import ScriptedAnalyze
from tests.support.slow_peers import wait_until


def test_idle_connections_of_one_address_leave_the_api_answering() -> None:
    app = create_app(ServiceSettings(run_analysis=False), ScriptedAnalyze())
    sock = socket.create_server(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, **server_options()))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    assert wait_until(lambda: server.started, 60)
    port = sock.getsockname()[1]
    idle: list[socket.socket] = []
    try:
        for _ in range(300):
            idle.append(
                socket.create_connection(("127.0.0.1", port), timeout=5, source_address=("127.0.0.2", 0))
            )
        share = MAX_CONNECTIONS // 4
        assert wait_until(lambda: HeadDeadlineProtocol.clients.open("127.0.0.2") == share, 60)
        # The connections past the share were answered 503 and closed at once.
        idle[-1].settimeout(5)
        assert idle[-1].recv(64).startswith(b"HTTP/1.1 503")
        statuses = []
        for _ in range(60):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
                statuses.append(resp.status)
        assert statuses == [200] * 60
    finally:
        for s in idle:
            s.close()
        server.should_exit = True
        thread.join(10)
        sock.close()
    assert wait_until(lambda: HeadDeadlineProtocol.clients.open("127.0.0.2") == 0, 60)


def test_four_flooding_addresses_leave_the_token_holders_answered(tmp_path) -> None:
    """4 addresses x 64 trickling connections took every one of serve's 256 (59 of 59 API requests
    with a valid token were 503, issue 36): they push out each other, never a token holder."""
    token = "t0ken-for-the-test"
    app = create_app(ServiceSettings(run_analysis=False, token=token), ScriptedAnalyze())
    sock = socket.create_server(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, **server_options(token)))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    assert wait_until(lambda: server.started, 60)
    port = sock.getsockname()[1]
    admission = HeadDeadlineProtocol.admission
    cut_before = admission.cut
    try:
        with Flood(port, FLOOD_SOURCES, MAX_CONNECTIONS // 4):
            assert wait_until(lambda: admission.open == MAX_CONNECTIONS, 20)
            statuses = []
            for _ in range(59):
                request = urllib.request.Request(
                    f"http://127.0.0.1:{port}/api/v1/status", headers={"Authorization": f"Bearer {token}"}
                )
                try:
                    with urllib.request.urlopen(request, timeout=5) as resp:
                        statuses.append(resp.status)
                except urllib.error.HTTPError as exc:
                    statuses.append(exc.code)
            assert statuses == [200] * 59
            assert admission.cut > cut_before and admission.open <= MAX_CONNECTIONS
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
    assert wait_until(lambda: admission.open == 0 and admission.authenticated == 0, 60)
