"""Slow collectors, unrenderable values and hostile HTTP clients, against the real server."""

from __future__ import annotations

import base64
import http.client
import os
import socket
import threading
from collections.abc import Iterable
from pathlib import Path

import bcrypt
import pytest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from fleetscope import contract
from fleetscope.errors import FleetscopeError
from fleetscope.exporters import webconfig
from fleetscope.exporters.base import Collector, NodeContext
from fleetscope.exporters.registry import NodeCollector
from fleetscope.exporters.safe_read import NotRegularFile, TooLarge, kernel_u64, read_bytes
from fleetscope.exporters.server import ExporterServer, render_text
from fleetscope.exporters.webconfig import WebConfig, load_web_config, parse_duration
from tests.support.exposition import series
from tests.support.prom import http_get


class Slow(Collector):
    """Blocks in collect() until released, like a read of a file that never answers."""

    name = "slow"

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        self.release = threading.Event()
        self.runs = 0

    def collect(self) -> Iterable[Metric]:
        self.runs += 1
        self.release.wait(30)
        yield GaugeMetricFamily("slow_done", "finished", value=1)


class Quick(Collector):
    name = "quick"

    def collect(self) -> Iterable[Metric]:
        yield GaugeMetricFamily("quick_value", "a value", value=2)


class Huge(Collector):
    """Yields a value no float can hold (a 400-digit counter read as int), next to good ones."""

    name = "huge"

    def collect(self) -> Iterable[Metric]:
        family = CounterMetricFamily("huge_things", "things", labels=["k"])
        family.add_metric(["bad"], int("9" * 400))
        family.add_metric(["good"], 5)
        yield family


class Many(Collector):
    name = "many"
    max_series = 100

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily("many_things", "things", labels=["i"])
        for i in range(1000):
            family.add_metric([str(i)], i)
        yield family


def ctx() -> NodeContext:
    return NodeContext(node_name="n")


def key(name: str, collector: str, reason: str | None = None) -> tuple:
    labels = (("collector", collector),) if reason is None else (("collector", collector), ("reason", reason))
    return (name, labels)


# --- collectors ---------------------------------------------------------------------------------
def test_a_slow_collector_misses_its_deadline_others_answer_and_it_is_not_started_again() -> None:
    slow = Slow(ctx())
    node = NodeCollector([slow, Quick(ctx())], timeout=0.3)
    try:
        got = series(render_text(node))
        assert got[key(contract.COLLECTOR_SUCCESS, "slow")] == 0
        assert got[key(contract.COLLECTOR_SUCCESS, "quick")] == 1
        assert got[("quick_value", ())] == 2
        assert got[key(contract.COLLECTOR_ERRORS, "slow", "deadline")] == 1
        for _ in range(3):  # still stuck: reported failed at once, never a second thread
            got = series(render_text(node))
            assert got[key(contract.COLLECTOR_SUCCESS, "slow")] == 0
        assert got[key(contract.COLLECTOR_ERRORS, "slow", "still_running")] == 3
        assert slow.runs == 1
        assert sum(1 for t in threading.enumerate() if t.name == "collector-slow") == 1
        slow.release.set()
        for _ in range(50):  # the stuck call returns; the next scrape starts it again
            got = series(render_text(node))
            if got[key(contract.COLLECTOR_SUCCESS, "slow")] == 1:
                break
        assert got[("slow_done", ())] == 1
        assert slow.runs >= 2
    finally:
        slow.release.set()
        node.close()


def test_a_value_that_cannot_be_rendered_is_dropped_and_counted() -> None:
    node = NodeCollector([Huge(ctx()), Quick(ctx())])
    got = series(render_text(node))  # before the fix: OverflowError, a 500 for every scrape
    assert got[("huge_things_total", (("k", "good"),))] == 5
    assert ("huge_things_total", (("k", "bad"),)) not in got
    assert got[key(contract.COLLECTOR_ERRORS, "huge", "unrenderable")] == 1
    assert got[key(contract.COLLECTOR_SUCCESS, "huge")] == 1
    assert got[("quick_value", ())] == 2


def test_render_text_itself_never_raises_on_a_bad_value() -> None:
    class Raw:
        def collect(self) -> Iterable[Metric]:
            yield from Huge(ctx()).collect()

    text = render_text(Raw()).decode()
    assert 'huge_things_total{k="good"} 5' in text
    assert "bad" not in text


def test_series_beyond_the_collector_cap_are_dropped_and_counted() -> None:
    got = series(render_text(NodeCollector([Many(ctx())])))
    assert sum(1 for name, _ in got if name == "many_things") == 100
    assert got[key(contract.COLLECTOR_ERRORS, "many", "series_limit")] == 900


# --- the safe reader ----------------------------------------------------------------------------
def test_safe_read_refuses_what_would_block_or_never_end(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    zero = tmp_path / "zero"
    zero.symlink_to("/dev/zero")
    for path in (fifo, zero, tmp_path):
        with pytest.raises(NotRegularFile):
            read_bytes(path)
    big = tmp_path / "big"
    big.write_bytes(b"1" * 100)
    assert read_bytes(big, 100) == b"1" * 100
    with pytest.raises(TooLarge):
        read_bytes(big, 99)
    assert kernel_u64(2**64 - 1) and not kernel_u64(2**64) and not kernel_u64(-1)
    assert not kernel_u64(float("nan")) and not kernel_u64(float("inf")) and kernel_u64(3.0)


# --- HTTP ---------------------------------------------------------------------------------------
def basic(user: str, password: str, scheme: str = "Basic") -> dict[str, str]:
    return {"Authorization": f"{scheme} " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@pytest.fixture
def auth_server():
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4))
    cfg = WebConfig(users={"prom": hashed})
    server = ExporterServer("127.0.0.1:0", NodeCollector([Quick(ctx())]), cfg)
    server.start()
    yield server, cfg, f"http://127.0.0.1:{server.port}"
    server.shutdown()


def test_a_flood_of_one_wrong_password_costs_one_bcrypt(auth_server) -> None:
    _, cfg, url = auth_server
    assert http_get(url + "/metrics", headers=basic("prom", "s3cret"))[0] == 200
    assert cfg.bcrypt_checks == 1
    for _ in range(20):
        assert http_get(url + "/metrics", headers=basic("prom", "guess"))[0] == 401
        assert http_get(url + "/metrics", headers=basic("eve", "guess"))[0] == 401  # unknown user
    assert cfg.bcrypt_checks == 3
    status, body = http_get(url + "/metrics", headers=basic("prom", "s3cret", scheme="bAsIc"))
    assert status == 200 and b"quick_value 2" in body  # the scheme is case-insensitive
    assert cfg.bcrypt_checks == 3


def test_distinct_wrong_passwords_cannot_evict_the_cached_success(monkeypatch) -> None:
    monkeypatch.setattr(webconfig, "_FAILURE_CACHE", 8)
    cfg = WebConfig(users={"prom": bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4))})
    header = basic("prom", "s3cret")["Authorization"]
    assert cfg.authorized(header)
    for i in range(30):
        assert not cfg.authorized(basic("prom", f"guess{i}")["Authorization"])
    assert len(cfg._failed) == 8  # bounded
    checks = cfg.bcrypt_checks
    assert cfg.authorized(header)
    assert cfg.bcrypt_checks == checks


def test_head_has_no_body_and_other_methods_are_405(auth_server) -> None:
    server, _, _ = auth_server
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    conn.request("HEAD", "/metrics", headers=basic("prom", "s3cret"))
    resp = conn.getresponse()
    assert resp.status == 200
    assert int(resp.headers["Content-Length"]) > 0
    assert resp.read() == b""
    conn.close()
    for method in ("POST", "PUT", "DELETE", "OPTIONS"):
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        conn.request(method, "/metrics", body=b"x")
        resp = conn.getresponse()
        assert resp.status == 405, method
        assert resp.headers["Allow"] == "GET, HEAD"
        resp.read()
        conn.close()


def test_rate_limit_answers_429_beyond_the_burst(tmp_path: Path) -> None:
    p = tmp_path / "web.yml"
    p.write_text("rate_limit:\n  interval: 1m\n  burst: 2\n")
    cfg = load_web_config(p)
    assert (cfg.rate_interval, cfg.rate_burst) == (60.0, 2)
    server = ExporterServer("127.0.0.1:0", NodeCollector([Quick(ctx())]), cfg)
    server.start()
    try:
        url = f"http://127.0.0.1:{server.port}/metrics"
        assert [http_get(url)[0] for _ in range(4)] == [200, 200, 429, 429]
    finally:
        server.shutdown()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("rate_limit:\n  interval: fast\n  burst: 1\n", "is not a duration"),
        ("rate_limit:\n  interval: 1s\n  burst: 0\n", "at least 1"),
        ("rate_limit:\n  interval: 1s\n  burst: -3\n", "whole number"),
        ("rate_limit:\n  interval: 1s\n  rate: 3\n", "unknown rate_limit key(s) ['rate']"),
    ],
)
def test_bad_rate_limit_is_one_clear_error(tmp_path: Path, text: str, message: str) -> None:
    p = tmp_path / "web.yml"
    p.write_text(text)
    with pytest.raises(FleetscopeError) as err:
        load_web_config(p)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_go_durations() -> None:
    assert parse_duration("1m30s") == 90.0
    assert parse_duration("250ms") == 0.25
    assert parse_duration("1.5h") == 5400.0
    assert parse_duration(0) == 0.0 and parse_duration("0") == 0.0
    assert parse_duration("10") is None and parse_duration("") is None and parse_duration("1d") is None


def test_connections_over_the_cap_get_503_and_the_slots_come_back() -> None:
    server = ExporterServer("127.0.0.1:0", NodeCollector([Quick(ctx())]), WebConfig(), max_connections=2)
    assert server.httpd.request_queue_size >= 128
    server.start()
    idle = []
    try:
        for _ in range(2):  # two slow peers that never send their request
            s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            idle.append(s)
        url = f"http://127.0.0.1:{server.port}/metrics"
        for _ in range(50):  # the accept loop takes the idle ones first
            status = http_get(url)[0]
            if status == 503:
                break
        assert status == 503
        assert server.httpd.refused >= 1
        for s in idle:
            s.close()
        for _ in range(50):
            status = http_get(url)[0]
            if status == 200:
                break
        assert status == 200
    finally:
        for s in idle:
            s.close()
        server.shutdown()
