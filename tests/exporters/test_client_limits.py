"""No client without credentials can starve an authenticated scrape (issue 26, item 12): the
trickle, idle and flood cases on loopback, the attackers on 127.0.0.2-5 and the scraper on
127.0.0.1 (all of 127/8 is loopback), bounded in count and time."""

from __future__ import annotations

import base64
import http.client
import socket
import threading
import time
from collections.abc import Iterator

import bcrypt
import pytest

from fleetscope.exporters.registry import NodeCollector
from fleetscope.exporters.server import ExporterServer
from fleetscope.exporters.webconfig import WebConfig
from tests.exporters.test_hostile import Quick, ctx
from tests.support.slow_peers import wait_until

AUTH = {"Authorization": "Basic " + base64.b64encode(b"prom:s3cret").decode()}


def _server(cfg: WebConfig, max_connections: int = 16, head_deadline: float = 1.0) -> ExporterServer:
    server = ExporterServer(
        "127.0.0.1:0", NodeCollector([Quick(ctx())]), cfg, max_connections=max_connections
    )
    server.httpd.head_deadline = head_deadline
    server.start()
    return server


@pytest.fixture
def auth_config() -> WebConfig:
    return WebConfig(users={"prom": bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4))})


def _scrape(port: int, headers: dict[str, str] | None = None, source: str = "127.0.0.1") -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5, source_address=(source, 0))
    try:
        conn.request("GET", "/metrics", headers=headers or {})
        resp = conn.getresponse()
        resp.read()
        return resp.status
    except OSError:
        return 0
    finally:
        conn.close()


def _connect(port: int, source: str) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))


@pytest.fixture
def attackers() -> Iterator[list[socket.socket]]:
    socks: list[socket.socket] = []
    yield socks
    for s in socks:
        s.close()


def test_trickling_clients_cannot_hold_the_scrapers_slots(auth_config, attackers) -> None:
    server = _server(auth_config)
    stop = threading.Event()
    try:
        for _ in range(40):  # 40 clients of one address, each trickling a header line
            try:
                s = _connect(server.port, "127.0.0.2")
                s.sendall(b"GET /metrics HTTP/1.1\r\n")
                attackers.append(s)
            except OSError:
                pass

        def trickle() -> None:
            while not stop.wait(0.3):
                for s in attackers:
                    try:
                        s.sendall(b"X-Pad: a\r\n")
                    except OSError:
                        pass

        thread = threading.Thread(target=trickle, daemon=True)
        thread.start()
        statuses = [_scrape(server.port, AUTH) for _ in range(40)]
        assert statuses == [200] * 40
        # Past the head deadline every trickling connection has been cut off, though it kept sending.
        time.sleep(1.5)
        assert server.httpd._clients is not None and server.httpd._clients.open("127.0.0.2") == 0
    finally:
        stop.set()
        server.shutdown()


def test_idle_connections_of_one_address_leave_the_others_served(auth_config, attackers) -> None:
    server = _server(auth_config, head_deadline=30.0)  # idle for the whole test
    try:
        for _ in range(100):
            try:
                attackers.append(_connect(server.port, "127.0.0.2"))
            except OSError:
                pass
        time.sleep(0.2)
        assert server.httpd._clients is not None and server.httpd._clients.open("127.0.0.2") == 4
        assert [_scrape(server.port, AUTH) for _ in range(20)] == [200] * 20
        assert server.httpd.refused >= 90
    finally:
        server.shutdown()


@pytest.mark.slow
def test_unauthenticated_flooders_cannot_empty_the_shared_rate_limit(auth_config) -> None:
    auth_config.rate_interval, auth_config.rate_burst = 0.05, 10  # 20 requests a second, burst 10
    server = _server(auth_config, max_connections=64)
    stop = threading.Event()
    refused: list[int] = []

    def flood(source: str) -> None:
        while not stop.is_set():
            refused.append(_scrape(server.port, None, source))

    floods = [threading.Thread(target=flood, args=(f"127.0.0.{i}",), daemon=True) for i in range(2, 6)]
    try:
        for t in floods:
            t.start()
        statuses = []
        for _ in range(30):
            statuses.append(_scrape(server.port, AUTH))
            time.sleep(0.1)
        stop.set()
        for t in floods:
            t.join(10)
        assert statuses == [200] * 30
        assert 429 in refused and 401 in refused and 200 not in refused
    finally:
        stop.set()
        server.shutdown()


def test_name_filters_select_families() -> None:
    """client_python's ``?name[]=`` filter, which the exporter ignored (issue 26, item 17)."""
    server = _server(WebConfig())
    try:
        url = "/metrics?name[]=quick_value&name[]=fleetscope_collector_errors_total"
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        conn.request("GET", url)
        body = conn.getresponse().read().decode()
        conn.close()
        names = {line.split("{")[0].split(" ")[0] for line in body.splitlines() if not line.startswith("#")}
        assert names <= {"quick_value", "fleetscope_collector_errors_total"} and "quick_value" in names
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        conn.request("GET", "/metrics?" + "&".join(["name[]=x"] * 5000))
        resp = conn.getresponse()
        assert resp.status == 400
        resp.read()
        conn.close()
    finally:
        server.shutdown()


class Flood:
    """``per_address`` connections from each of ``sources``, each trickling a header line now and
    then and opened again as soon as the server closes it (issue 36, item 1)."""

    def __init__(self, port: int, sources: list[str], per_address: int, idle: bool = False) -> None:
        self.port, self.sources, self.per_address, self.idle = port, sources, per_address, idle
        self.stop = threading.Event()
        self.opened = 0
        self.threads = [threading.Thread(target=self._run, args=(s,), daemon=True) for s in sources]

    def _open(self, source: str) -> socket.socket | None:
        try:
            s = _connect(self.port, source)
            if not self.idle:
                s.sendall(b"GET /metrics HTTP/1.1\r\n")
            s.setblocking(False)
            self.opened += 1
            return s
        except OSError:
            return None

    def _run(self, source: str) -> None:
        socks: list[socket.socket | None] = [self._open(source) for _ in range(self.per_address)]
        while not self.stop.is_set():
            for i, s in enumerate(socks):
                alive = s is not None
                if s is not None:
                    try:
                        if not self.idle:
                            s.sendall(b"X-Pad: a\r\n")
                        if s.recv(1, socket.MSG_PEEK) == b"":
                            alive = False
                    except BlockingIOError:
                        pass
                    except OSError:
                        alive = False
                if not alive:
                    if s is not None:
                        s.close()
                    socks[i] = self._open(source)
            self.stop.wait(0.05)
        for s in socks:
            if s is not None:
                s.close()

    def __enter__(self) -> Flood:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(10)


FLOOD_SOURCES = [f"127.0.0.{i}" for i in range(2, 6)]


@pytest.mark.parametrize("idle", [False, True], ids=["trickling", "idle"])
def test_four_addresses_cannot_take_the_authenticated_scrapes(auth_config, idle) -> None:
    """4 addresses x 16 connections fill the 64 slots (79 of 79 authenticated scrapes were 503):
    newcomers push out the longest-waiting, and an authenticated scrape leaves the open pool."""
    server = _server(auth_config, max_connections=64, head_deadline=30.0)
    try:
        with Flood(server.port, FLOOD_SOURCES, 16, idle=idle) as flood:
            # The admission is made at the first connection: read it once the flood holds the slots.
            httpd = server.httpd
            assert wait_until(lambda: httpd._admission is not None and httpd._admission.open == 64, 60)
            admission = httpd._admission
            statuses = [_scrape(server.port, AUTH) for _ in range(79)]
            assert statuses == [200] * 79
            assert admission is not None and admission.cut >= 1 and admission.open <= 64
            # Without credentials a request is answered too, from the open pool: 401.
            assert _scrape(server.port, None) == 401
            assert flood.opened >= 64
    finally:
        server.shutdown()


def test_the_authenticated_pool_is_bounded_and_released(auth_config) -> None:
    server = _server(auth_config, max_connections=2, head_deadline=30.0)
    try:
        for _ in range(10):
            # One scrape after another: each is admitted to the (one-slot) pool, and its slots (the
            # pool's and the address's share) come back once the server has closed the connection
            # and its thread ends; the client may see the answer before either.
            assert _scrape(server.port, AUTH) == 200
            admission, clients = server.httpd._admission, server.httpd._clients
            assert admission is not None and clients is not None
            assert wait_until(lambda a=admission: a.authenticated == 0 and a.open == 0, 60)
            assert wait_until(lambda c=clients: c.open("127.0.0.1") == 0, 60)
    finally:
        server.shutdown()
