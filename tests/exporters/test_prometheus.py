"""End to end: a real Prometheus scrapes real ``fleetscope exporter`` processes on the p5 tree.

One Prometheus scrapes two exporters on a private copy of the p5.48xlarge tree: one over plain HTTP,
one over TLS (a self-signed certificate made here with ``openssl``) with basic auth, exactly as a
node would be scraped. While they run, a thread keeps bumping three counters of ``rdmap79s0`` in
place, as the kernel would, so that ``rate()`` has something to see.
"""

from __future__ import annotations

import base64
import os
import ssl
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import bcrypt
import pytest

from fleetscope import contract
from tests.exporters.conftest import P5, P5_EFA_DEVICES, copy_tree, tree_flags
from tests.support.exporter import ExporterProcess
from tests.support.prom import Prometheus, http_get, promtool, wait_for

pytestmark = [pytest.mark.server]

NODE = "p5-node-1"
USER, PASSWORD = "prometheus", "correct horse battery staple"
COLLECTORS = ["--collector.disable-defaults", "--collector.efa", "--collector.lustre"]
#: What the bumping thread adds to rdmap79s0's port counters on each step.
BUMPS = {"tx_bytes": 8_000_000, "tx_pkts": 1_000, "retrans_pkts": 10}


@dataclass
class Stack:
    tree: Path
    plain: ExporterProcess
    secure: ExporterProcess
    prom: Prometheus
    cert: Path


def make_self_signed_cert(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "node.crt", directory / "node.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )
    return cert, key


def bump_counters(tree: Path, stop: threading.Event) -> None:
    hw = tree / "sys" / "class" / "infiniband" / "rdmap79s0" / "ports" / "1" / "hw_counters"
    values = {name: int((hw / name).read_text()) for name in BUMPS}
    while not stop.wait(0.25):
        for name, step in BUMPS.items():
            values[name] += step
            # In place, same inode, one write that never shrinks the file: a concurrent read sees
            # the old or the new number, never an empty file.
            fd = os.open(hw / name, os.O_WRONLY)
            try:
                os.pwrite(fd, f"{values[name]}\n".encode(), 0)
            finally:
                os.close(fd)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    work = tmp_path_factory.mktemp("e2e")
    tree = work / "p5"
    copy_tree(P5, tree)
    cert, key = make_self_signed_cert(work)
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    web = work / "web.yml"
    web.write_text(
        f"tls_server_config:\n  cert_file: {cert.name}\n  key_file: {key.name}\n"
        f"basic_auth_users:\n  {USER}: '{hashed}'\n"
        "http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n"
    )
    flags = [*tree_flags(tree), f"--node.name={NODE}", *COLLECTORS]
    plain = ExporterProcess(*flags, log_dir=work)
    secure = ExporterProcess(*flags, f"--web.config.file={web}", log_dir=work)
    secure.url = secure.url.replace("http://", "https://")
    stop = threading.Event()
    bumper = threading.Thread(target=bump_counters, args=(tree, stop), daemon=True)
    prom = Prometheus(
        work / "prom",
        scrape_configs=[
            {"job_name": "plain", "static_configs": [{"targets": [f"127.0.0.1:{plain.port}"]}]},
            {
                "job_name": "secure",
                "scheme": "https",
                "tls_config": {"ca_file": str(cert)},
                "basic_auth": {"username": USER, "password": PASSWORD},
                "static_configs": [{"targets": [f"127.0.0.1:{secure.port}"]}],
            },
        ],
    )
    plain.start()
    try:
        _start_tls(secure)
        bumper.start()
        with prom:
            yield Stack(tree, plain, secure, prom, cert)
    finally:
        stop.set()
        rc_plain, rc_secure = plain.stop(), secure.stop()
    assert (rc_plain, rc_secure) == (0, 0), "exporters did not exit cleanly on SIGTERM"


def _start_tls(proc: ExporterProcess) -> None:
    """ExporterProcess polls over plain HTTP; a TLS exporter is polled by its port instead."""
    import socket

    proc.proc = subprocess.Popen(
        proc.argv, stdout=proc.log_path.open("wb"), stderr=subprocess.STDOUT, env=proc.env
    )

    def listening() -> bool:
        assert proc.proc is not None and proc.proc.poll() is None, proc.log()
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", proc.port)) == 0

    wait_for(listening, timeout=30, what="TLS exporter to listen")


def test_contract_efa_series_come_back_through_prometheus(stack: Stack) -> None:
    prom = stack.prom
    prom.wait_until(f'{contract.EFA_TX_BYTES}{{job="plain"}}', min_series=32)
    efa = contract.metrics_by_origin("efa")
    assert len(efa) >= 35
    for metric in efa:
        want = 64 if metric == contract.EFA_LIFESPAN else 32
        result = prom.query(f'count({metric}{{job="plain", {contract.NODE_LABEL}="{NODE}"}})')
        assert result and int(result[0]["value"][1]) == want, metric
    ports = prom.query(f'count by (port) ({contract.EFA_TX_PKTS}{{job="plain"}})')
    assert {r["metric"]["port"] for r in ports} == {"1"}
    devices = prom.query(f'count by (port) ({METRIC_DEVICE_LEVEL}{{job="plain"}})')
    assert [r["metric"].get("port", "") for r in devices] == [""]  # Prometheus drops empty labels
    got = {r["metric"]["device"] for r in prom.query(f'{contract.EFA_RX_BYTES}{{job="plain"}}')}
    assert got == set(P5_EFA_DEVICES)
    assert prom.value(f'{contract.COLLECTOR_SUCCESS}{{job="plain", collector="efa"}}') == 1
    assert prom.value(f'{contract.EFA_LIFESPAN}{{job="plain", device="rdmap79s0", port="1"}}') == 0.012


METRIC_DEVICE_LEVEL = contract.METRICS["efa_cmds_err_total"]


def test_rate_over_efa_counters(stack: Stack) -> None:
    prom = stack.prom
    bumped = f'{contract.EFA_TX_BYTES}{{job="plain", device="rdmap79s0"}}'
    # A 4 s window of a 1 s scrape interval is all data, so rate() is close to the true rate.
    rate = wait_for(
        lambda: prom.value(f"rate({bumped}[4s])"),
        timeout=20,
        what="a non-zero rate of the bumped tx_bytes",
    )
    assert 8_000_000 < rate < 8_000_000 * 4 * 4  # about 4 bumps of 8 MB per second
    # The retransmit ratio the rules use (retrans_pkts / tx_pkts) comes out as bumped: 10 / 1000.
    ratio = prom.value(
        f'rate({contract.EFA_RETRANS_PKTS}{{job="plain", device="rdmap79s0"}}[1m])'
        f' / rate({contract.EFA_TX_PKTS}{{job="plain", device="rdmap79s0"}}[1m])'
    )
    assert ratio == pytest.approx(0.01, rel=0.2)
    # Devices nobody touched have a rate of exactly 0.
    still = prom.query(f'rate({contract.EFA_TX_BYTES}{{job="plain", device!="rdmap79s0"}}[1m]) > 0')
    assert still == []


def test_lustre_series_come_back_through_prometheus(stack: Stack) -> None:
    prom = stack.prom
    for metric in (contract.LUSTRE_CLIENT_READ_BYTES, contract.LUSTRE_CLIENT_WRITE_BYTES):
        (series,) = prom.wait_until(f'{metric}{{job="plain"}}')
        assert series["metric"][contract.NODE_LABEL] == NODE
        assert float(series["value"][1]) > 0
    ops = prom.query(f'{contract.LUSTRE_CLIENT_OPERATIONS}{{job="plain", operation="open"}}')
    assert len(ops) == 1
    assert prom.value(f'{contract.COLLECTOR_SUCCESS}{{job="plain", collector="lustre"}}') == 1


def test_tls_and_basic_auth_exporter_is_scraped_by_prometheus(stack: Stack) -> None:
    stack.prom.wait_until('up{job="secure"} == 1')
    stack.prom.wait_until(f'{contract.EFA_TX_BYTES}{{job="secure"}}', min_series=32)


def _get(url: str, cert: Path, auth: tuple[str, str] | None) -> tuple[int, bytes, dict]:
    headers = {}
    if auth:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
    ctx = ssl.create_default_context(cafile=str(cert))
    req = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as resp:
            return resp.status, resp.read(), dict(resp.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers)


def test_web_config_password_and_tls(stack: Stack) -> None:
    url = f"{stack.secure.url}/metrics"
    status, _, headers = _get(url, stack.cert, (USER, "wrong password"))
    assert status == 401
    assert headers["WWW-Authenticate"].startswith("Basic")
    assert _get(url, stack.cert, None)[0] == 401
    assert _get(url, stack.cert, ("nobody", PASSWORD))[0] == 401
    status, body, headers = _get(url, stack.cert, (USER, PASSWORD))
    assert status == 200
    assert body.count(f"{contract.EFA_TX_BYTES}{{".encode()) == 32
    assert headers["X-Content-Type-Options"] == "nosniff"
    # A client that connects and never starts its TLS handshake does not block other clients, and
    # TLS connections do not leak descriptors.
    import socket

    import psutil

    exporter = psutil.Process(stack.secure.proc.pid)
    with socket.create_connection(("127.0.0.1", stack.secure.port)):
        fds_before = exporter.num_fds()
        for _ in range(20):
            assert _get(url, stack.cert, (USER, PASSWORD))[0] == 200
            assert _get(url, stack.cert, (USER, "wrong"))[0] == 401
    assert exporter.num_fds() <= fds_before + 2
    # Plain HTTP to the TLS port gets no metrics.
    plain_url = url.replace("https://", "http://")
    try:
        status = http_get(plain_url, timeout=5)[0]
    except OSError:
        status = None
    assert status != 200


def test_promtool_accepts_a_real_scrape(stack: Stack) -> None:
    status, body = http_get(f"{stack.plain.url}/metrics")
    assert status == 200
    assert body.count(b"\nefa_") >= 32 * 35
    res = promtool("check", "metrics", input=body)
    assert res.returncode == 0, (res.stdout + res.stderr).decode()[-2000:]
