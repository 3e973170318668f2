"""Resilience against a real Prometheus: it stops and comes back; it accepts but never answers."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest

from fleetscope import contract
from fleetscope.simulate.live import LiveCluster
from fleetscope.simulate.spec import ScenarioSpec
from tests.service.support import ServeProcess
from tests.support.exposition import value
from tests.support.prom import Prometheus, http_get, wait_for

pytestmark = [pytest.mark.server]


def _get(url: str) -> tuple[int, dict]:
    status, body = http_get(url, timeout=5)
    return status, json.loads(body)


@pytest.fixture
def cluster(tmp_path: Path):
    spec = ScenarioSpec(name="outage", nodes=2, gpus_per_node=2, efa_per_node=1)
    with LiveCluster(spec, base_port=0, targets_file=tmp_path / "targets.json") as live:
        yield live


def test_prometheus_stops_and_comes_back(tmp_path: Path, cluster: LiveCluster):
    prom = Prometheus(
        tmp_path / "prom",
        scrape_configs=[
            {"job_name": "nodes", "file_sd_configs": [{"files": [str(tmp_path / "targets.json")]}]}
        ],
    )
    with prom:
        prom.wait_until("fleetscope_gpu_up", min_series=4, timeout=30)
        with ServeProcess(
            prom.url, "--interval", "0.5", "--window", "120", "--step", "1", workdir=tmp_path
        ) as serve:
            wait_for(lambda: _get(f"{serve.url}/readyz")[0] == 200, timeout=60, what="first analysis")
            before = _get(f"{serve.url}/api/v1/nodes")[1]
            assert len(before["nodes"]) == 2

            prom.stop()
            status, ready = wait_for(
                lambda: (r := _get(f"{serve.url}/readyz"))[0] == 503 and r, timeout=30, what="readyz to fail"
            )
            assert ready["stale"] is True and ready["last_error"] and ready["failing_since"]
            # Still up, still serving the last verdicts, marked stale with their age.
            assert http_get(f"{serve.url}/healthz")[0] == 200
            status, during = _get(f"{serve.url}/api/v1/nodes")
            assert status == 200 and during["status"]["stale"] is True
            assert during["status"]["age_seconds"] >= 0 and during["nodes"] == before["nodes"]
            metrics = http_get(f"{serve.url}/metrics")[1].decode()
            assert value(metrics, contract.SERVICE_VERDICTS_STALE) == 1
            assert value(metrics, contract.SERVICE_ANALYSIS_SUCCESS) == 0

            prom.start()  # same port, same data
            wait_for(lambda: _get(f"{serve.url}/readyz")[0] == 200, timeout=60, what="analysis to resume")
            status, after = _get(f"{serve.url}/api/v1/nodes")
            assert after["status"]["stale"] is False and after["status"]["last_error"] is None
            assert serve.proc.poll() is None
        log = serve.log()
        assert log.count("analysis failed") == 1 and "recovered" in log, log


def test_prometheus_that_never_answers_times_out_and_the_service_stays_up(tmp_path: Path):
    """A black hole: it accepts connections and never answers (a hung Prometheus or proxy)."""
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(64)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        hole.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(hole.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    url = f"http://127.0.0.1:{hole.getsockname()[1]}"
    try:
        with ServeProcess(url, "--interval", "0.5", "--timeout", "1", workdir=tmp_path) as serve:
            _, ready = wait_for(
                lambda: (r := _get(f"{serve.url}/readyz"))[0] == 503 and r[1]["last_error"] and r,
                timeout=30,
                what="the timeout to be reported",
            )
            assert ready["ready"] is False and url.split("//")[1] in ready["last_error"], ready
            # The HTTP side answers at once while the analysis waits on the hung Prometheus.
            assert _get(f"{serve.url}/api/v1/status")[0] == 200
            assert accepted, "the service never tried to reach Prometheus"
    finally:
        stop.set()
        t.join(2)
        for s in accepted:
            s.close()
        hole.close()
