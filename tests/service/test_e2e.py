"""End to end: the simulator's live virtual nodes -> a real Prometheus -> ``fleetscope serve`` (a real
process) -> the JSON API, the verdict metrics (scraped back by Prometheus) and the page in headless
Chromium, checked by the failing node's state class and a pixel of its cell in a screenshot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from PIL import Image

from fleetscope import contract
from fleetscope.simulate.live import LiveCluster
from fleetscope.simulate.spec import FaultSpec, ScenarioSpec
from tests.service.support import COLOURS, ROOT, ServeProcess, chromium, close
from tests.support.exposition import value
from tests.support.prom import Prometheus, http_get, wait_for

pytestmark = [pytest.mark.server, pytest.mark.browser]

FAULT_NODE = 1


class _Cells(HTMLParser):
    """Collects the grid's node cells (class, data-state, data-rect) and the banner from a DOM dump."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: dict[str, dict[str, str]] = {}
        self.banner: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = {k: v or "" for k, v in attrs}
        if "node" in a.get("class", "").split() and "data-node" in a:
            self.cells[a["data-node"]] = a
        if a.get("id") == "banner":
            self.banner = a


@pytest.fixture
def cluster(tmp_path: Path):
    # A GPU falls off the bus on node 1 a few seconds after start.
    spec = ScenarioSpec(
        name="e2e",
        nodes=4,
        gpus_per_node=8,
        efa_per_node=1,
        faults=[FaultSpec(kind="gpu_lost", at_s=5.0, node=FAULT_NODE, gpu=3)],
    )
    with LiveCluster(spec, base_port=0, targets_file=tmp_path / "targets.json") as live:
        yield live


def test_injected_fault_reaches_api_metrics_and_page(tmp_path: Path, cluster: LiveCluster):
    failing = cluster.model.hostnames[FAULT_NODE]
    healthy = cluster.model.hostnames[0]
    # The service's port is chosen first so Prometheus can scrape its verdicts back.
    serve = ServeProcess(
        "http://placeholder",
        *("--interval", "1", "--window", "300", "--step", "1"),
        workdir=tmp_path,
    )
    prom = Prometheus(
        tmp_path / "prom",
        scrape_configs=[
            {"job_name": "nodes", "file_sd_configs": [{"files": [str(tmp_path / "targets.json")]}]},
            {"job_name": "fleetscope", "static_configs": [{"targets": [f"127.0.0.1:{serve.port}"]}]},
        ],
    )
    with prom:
        serve.argv[serve.argv.index("http://placeholder")] = prom.url
        prom.wait_until(f"{contract.GPU_UP}", min_series=4 * 8, timeout=30)
        with serve:
            # 1. the API
            def failing_finding():
                status, body = http_get(f"{serve.url}/api/v1/findings?kind=failing_node&node={failing}")
                found = status == 200 and json.loads(body)["findings"]
                return found

            findings = wait_for(failing_finding, timeout=60, what=f"a failing_node finding for {failing}")
            assert findings[0]["node"] == failing and findings[0]["end"] is None
            nodes = json.loads(http_get(f"{serve.url}/api/v1/nodes")[1])
            states = {n["node"]: n["state"] for n in nodes["nodes"]}
            assert states[failing] == "failing" and states[healthy] == "healthy", states
            assert http_get(f"{serve.url}/readyz")[0] == 200

            # 2. the verdict metrics, in the service's /metrics and scraped back by Prometheus
            text = http_get(f"{serve.url}/metrics")[1].decode()
            assert value(text, contract.NODE_HEALTH, state="failing", **{contract.NODE_LABEL: failing}) == 1
            prom.wait_until(
                f'{contract.NODE_HEALTH}{{{contract.NODE_LABEL}="{failing}",state="failing"}} == 1',
                timeout=30,
            )
            assert prom.value(f'sum({contract.FINDINGS}{{kind="failing_node"}})') >= 1

            # 3. the drain plan, from the service and from `fleetscope plan` on the same Prometheus: at
            # the default max fraction (0.1) a 4-node cluster still drains its first failing node
            plan = json.loads(http_get(f"{serve.url}/api/v1/plan")[1])["plan"]
            assert plan["limit"] == 1 and [d["node"] for d in plan["drain"]] == [failing], plan
            assert plan["drain"][0]["argv"][0][:4] == [
                "scontrol",
                "update",
                f"NodeName={failing}",
                "State=DRAIN",
            ]
            res = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "fleetscope",
                    "plan",
                    "--prometheus",
                    prom.url,
                    "--window",
                    "300",
                    "--step",
                    "1",
                    "--scheduler",
                    "kubernetes",
                    "--format",
                    "json",
                ],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
            assert res.returncode == 0, res.stderr
            assert json.loads(res.stdout)["drain"][0]["argv"][0] == ["kubectl", "cordon", failing]

            # 4. the page, in headless Chromium, after its script ran
            dom = chromium(serve.url + "/", tmp_path, "--dump-dom").stdout.decode()
            cells = _Cells()
            cells.feed(dom)
            assert failing in cells.cells, f"no cell for {failing} in the page: {dom[:1500]}"
            cell = cells.cells[failing]
            assert "state-failing" in cell["class"].split() and cell["data-state"] == "failing"
            assert "state-healthy" in cells.cells[healthy]["class"].split()
            assert "state-failing" in cells.banner["class"].split()

            shot = tmp_path / "page.png"
            chromium(serve.url + "/", tmp_path, f"--screenshot={shot}")
            x, y, _, _ = (int(v) for v in cell["data-rect"].split(","))
            hx, hy, _, _ = (int(v) for v in cells.cells[healthy]["data-rect"].split(","))
            with Image.open(shot) as img:
                assert img.format == "PNG" and img.width == 1200, (img.format, img.size)
                rgb = img.convert("RGB")
            # A corner of the cell's padding: only the cell's background colour is painted there.
            got = rgb.getpixel((x + 3, y + 3))
            assert close(got, COLOURS["failing"]), f"failing node cell is {got}"
            got_healthy = rgb.getpixel((hx + 3, hy + 3))
            assert close(got_healthy, COLOURS["healthy"]), f"healthy node cell is {got_healthy}"
