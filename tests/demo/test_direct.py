"""The fallback without Prometheus: what it scrapes over real HTTP it writes as a recording that the
analyzers' file loader and promtool's backfill both read, with every sample in place."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from fleetscope.demo.direct import DirectAnalysis
from fleetscope.window.openmetrics import read_openmetrics
from tests.support.http import http_server
from tests.support.prom import backfill_openmetrics

EXPOSITION = """\
# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature.
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP{Hostname="node-0",gpu="0",modelName="H100 \\"SXM\\" 80GB"} 41
DCGM_FI_DEV_GPU_TEMP{Hostname="node-0",gpu="1",modelName="H100 \\"SXM\\" 80GB"} 43.5
# TYPE fleetscope_gpu_xid_errors_total counter
fleetscope_gpu_xid_errors_total{Hostname="node-0",gpu="1",xid="79"} 2
# TYPE DCGM_FI_DEV_PCIE_REPLAY_COUNTER counter
DCGM_FI_DEV_PCIE_REPLAY_COUNTER{Hostname="node-0",gpu="0"} 7
"""


class _Node(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = EXPOSITION.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def node() -> Iterator[str]:
    with http_server(_Node) as hostport:
        yield hostport


def test_scrapes_become_a_recording_both_readers_accept(tmp_path: Path, node: str) -> None:
    targets = tmp_path / "targets.json"
    # an unreachable target is skipped, not fatal
    targets.write_text(json.dumps([{"targets": [node, "127.0.0.1:1"]}]))
    direct = DirectAnalysis(targets, tmp_path / "recording.om")
    direct.scrape()
    time.sleep(0.05)  # two distinct timestamps (milliseconds)
    direct.scrape()
    direct.write()
    assert not (tmp_path / "recording.tmp").exists()

    text = direct.recording.read_text()
    assert "# TYPE fleetscope_gpu_xid_errors counter\n" in text  # typed like the simulator's
    assert "# TYPE DCGM_FI_DEV_PCIE_REPLAY_COUNTER unknown\n" in text
    assert text.endswith("# EOF\n")

    raw, t0, t1, _ = read_openmetrics(direct.recording)
    (first, second) = (s[0] for s in direct.scrapes)
    assert (t0, t1) == (first, second)
    temps = {s.labels["gpu"]: s for s in raw["DCGM_FI_DEV_GPU_TEMP"]}
    assert temps["1"].labels["modelName"] == 'H100 "SXM" 80GB'
    assert list(temps["1"].values) == [43.5, 43.5]
    (xid,) = raw["fleetscope_gpu_xid_errors_total"]
    assert xid.labels == {"Hostname": "node-0", "gpu": "1", "xid": "79"}
    assert list(xid.values) == [2.0, 2.0]
    # a DCGM counter keeps its name (the exposition parser would add _total to it)
    (replay,) = raw["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"]
    assert list(replay.values) == [7.0, 7.0]
    assert "DCGM_FI_DEV_PCIE_REPLAY_COUNTER_total" not in raw

    backfill_openmetrics(direct.recording, tmp_path / "tsdb")
    assert any(p.is_dir() and p.name.startswith("01") for p in (tmp_path / "tsdb").iterdir())


def test_scrapes_older_than_the_window_are_dropped(tmp_path: Path, node: str) -> None:
    targets = tmp_path / "targets.json"
    targets.write_text(json.dumps([{"targets": [node]}]))
    direct = DirectAnalysis(targets, tmp_path / "recording.om", window=60)
    direct.scrape()
    old_time, samples = direct.scrapes[0]
    direct.scrapes[0] = (old_time - 120, samples)
    direct.scrape()
    assert len(direct.scrapes) == 1
    assert direct.scrapes[0][0] >= old_time
