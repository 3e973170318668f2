"""The collector framework in process: self-metrics, a failing collector, the text encoder, the web config."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path

import bcrypt
import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.metrics_core import Metric

from fleetscope import __version__, contract
from fleetscope.errors import FleetscopeError
from fleetscope.exporters.base import Collector, NodeContext
from fleetscope.exporters.efa import EfaCollector
from fleetscope.exporters.registry import NodeCollector, build_collectors
from fleetscope.exporters.server import ExporterServer, render_text
from fleetscope.exporters.webconfig import WebConfig, load_web_config
from tests.exporters.conftest import P5
from tests.support.exposition import series
from tests.support.prom import http_get


class Exploding(Collector):
    name = "exploding"

    def collect(self) -> Iterable[Metric]:
        yield GaugeMetricFamily("half_done", "yielded before the failure", value=1)
        raise RuntimeError("sensor fell off")


class Skipping(Collector):
    name = "skipping"

    def collect(self) -> Iterable[Metric]:
        self.skip("unparsable", "some/file")
        yield CounterMetricFamily("skipping_things", "things", value=3)


def ctx() -> NodeContext:
    return NodeContext(sysfs=P5 / "sys", node_name="node-a")


def test_failing_collector_reports_success_0_and_others_are_served() -> None:
    node = NodeCollector([Exploding(ctx()), EfaCollector(ctx()), Skipping(ctx())])
    got = series(render_text(node))
    assert got[(contract.COLLECTOR_SUCCESS, (("collector", "exploding"),))] == 0
    assert got[(contract.COLLECTOR_SUCCESS, (("collector", "efa"),))] == 1
    assert got[(contract.COLLECTOR_SUCCESS, (("collector", "skipping"),))] == 1
    # Nothing of a failed collector leaks out half-done; the others are all there.
    assert not any(name == "half_done" for name, _ in got)
    assert sum(1 for name, _ in got if name == contract.EFA_TX_BYTES) == 32
    assert got[("skipping_things_total", ())] == 3
    assert got[(contract.EXPORTER_BUILD_INFO, (("version", __version__),))] == 1
    assert got[(contract.COLLECTOR_ERRORS, (("collector", "skipping"), ("reason", "unparsable")))] == 1
    for name in ("exploding", "efa", "skipping"):
        assert got[(contract.COLLECTOR_DURATION, (("collector", name),))] >= 0


def test_collector_that_cannot_load_becomes_a_failing_stub(monkeypatch) -> None:
    from fleetscope.exporters import registry

    monkeypatch.setitem(registry.KNOWN_COLLECTORS, "nosuch", ("fleetscope.exporters.nosuch:X", False))
    (stub,) = build_collectors(["nosuch"], ctx())
    assert stub.name == "nosuch"
    got = series(render_text(NodeCollector([stub])))
    assert got[(contract.COLLECTOR_SUCCESS, (("collector", "nosuch"),))] == 0


def test_render_text_matches_generate_latest() -> None:
    """Same samples as client_python's encoder, including families that take the fallback path."""
    hist_registry = CollectorRegistry()
    Histogram("demo_latency_seconds", "a histogram", registry=hist_registry).observe(0.3)

    class Mixed:
        def collect(self) -> Iterable[Metric]:
            yield from EfaCollector(ctx()).collect()
            yield from hist_registry.collect()
            yield InfoMetricFamily("demo", "info", value={"a": "b"})
            g = GaugeMetricFamily("demo_escapes", "help with \\ and\nnewline", labels=["v"])
            g.add_metric(['quote " back \\ nl \n'], float("nan"))
            g.add_metric(["inf"], float("inf"))
            g.add_metric(["big"], 2**60)
            g.add_metric(["float"], 1.5e-7)
            yield g

    ours, theirs = render_text(Mixed()).decode(), generate_latest(Mixed()).decode()  # type: ignore[arg-type]
    a, b = series(ours), series(theirs)
    assert a.keys() == b.keys()
    for key, value in b.items():
        assert a[key] == value or (value != value and a[key] != a[key]), key
    helps = [line for line in theirs.splitlines() if line.startswith("#")]
    assert helps == [line for line in ours.splitlines() if line.startswith("#")]


def test_concurrent_scrapes_over_http_are_consistent() -> None:
    node = NodeCollector([EfaCollector(ctx())])
    server = ExporterServer("127.0.0.1:0", node, WebConfig())
    server.start()
    try:
        url = f"http://127.0.0.1:{server.port}/metrics"
        bodies: list[bytes] = []

        def scrape() -> None:
            for _ in range(5):
                status, body = http_get(url)
                assert status == 200
                bodies.append(body)

        threads = [threading.Thread(target=scrape) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(bodies) == 30
        efa_lines = {
            b"\n".join(line for line in body.splitlines() if line.startswith(b"efa_")) for body in bodies
        }
        assert len(efa_lines) == 1  # every scrape saw the same 32 devices and values
        assert http_get(f"http://127.0.0.1:{server.port}/nope")[0] == 404
        status, landing = http_get(f"http://127.0.0.1:{server.port}/")
        assert status == 200 and b'href="metrics"' in landing
    finally:
        server.shutdown()


# --- web config ---------------------------------------------------------------------------------
def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "web.yml"
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tls_server_config: {}\nbasic_auth_user: {}\n", "unknown key(s) ['basic_auth_user']"),
        ("tls_server_config:\n  cert_file: a\n  key_file: b\n  certfile: c\n", "unknown tls_server_config "
                                                                               "key(s) ['certfile']"),
        ("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_allowed_sans: [x]\n", "not supported by fleetscope"),  # noqa: E501
        ("tls_server_config:\n  cert_file: a\n", "needs cert_file and key_file"),
        ("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: Bogus\n", "unknown client_auth_type"),  # noqa: E501
        ("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: "
         "RequireAndVerifyClientCert\n", "needs client_ca_file"),
        ("tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: SSL3\n", "unknown min_version"),
        ("basic_auth_users:\n  alice: plaintext\n", "is not a bcrypt hash"),
        ("basic_auth_users: [alice]\n", "basic_auth_users must be a mapping"),
        ("http_server_config:\n  header: {}\n", "unknown http_server_config key(s) ['header']"),
        ("- just\n- a list\n", "must be a mapping"),
        ("key: [unclosed\n", "not valid YAML"),
    ],
)  # fmt: skip
def test_bad_web_config_is_one_clear_error(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(FleetscopeError) as err:
        load_web_config(write(tmp_path, text))
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_web_config_file(tmp_path: Path) -> None:
    with pytest.raises(FleetscopeError, match="No such file"):
        load_web_config(tmp_path / "absent.yml")


def test_basic_auth_check() -> None:
    import base64

    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    cfg = WebConfig(users={"prom": hashed.encode()})

    def header(user: str, pw: str) -> str:
        return "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode()

    assert cfg.authorized(header("prom", "s3cret"))
    assert cfg.authorized(header("prom", "s3cret"))  # cached path
    assert not cfg.authorized(header("prom", "wrong"))
    assert not cfg.authorized(header("eve", "s3cret"))
    assert not cfg.authorized(header("prom", "x" * 100))  # over bcrypt's 72 bytes: no match, no crash
    assert not cfg.authorized("Basic !!!notbase64")
    assert not cfg.authorized("Bearer abc")
    assert not cfg.authorized(None)
    assert WebConfig().authorized(None)


def test_skip_counts_every_time_and_logs_each_problem_once(caplog: pytest.LogCaptureFixture) -> None:
    c = Skipping(ctx())
    with caplog.at_level("WARNING"):
        for i in range(1500):
            c.skip("unreadable", f"file-{i}")
        for _ in range(10):
            c.skip("unreadable", "file-0")
    assert c.error_counts() == {"unreadable": 1510}
    assert len(caplog.records) == 1000  # bounded: a broken tree cannot flood the log
