"""The page in headless Chromium against the app served by uvicorn in this process: stale verdicts
are shown as stale, and a browser given the token (HTTP Basic) loads the page and its data."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import uvicorn

from fleetscope.service.app import ServiceSettings, create_app
from tests.service.support import ScriptedAnalyze, chromium, prometheus_down
from tests.service.test_e2e import _Cells
from tests.support.prom import free_port, http_get, wait_for

pytestmark = [pytest.mark.browser]


@contextmanager
def serving(app) -> Iterator[str]:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(
            lambda: http_get(f"http://127.0.0.1:{port}/healthz", timeout=1)[0] == 200, 20, what="uvicorn"
        )
        yield f"127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def test_page_marks_stale_verdicts(tmp_path: Path):
    scripted = ScriptedAnalyze()
    app = create_app(ServiceSettings(run_analysis=False), scripted)
    assert app.state.runner.run_once()
    scripted.error = prometheus_down()
    assert not app.state.runner.run_once()
    with serving(app) as hostport:
        dom = chromium(f"http://{hostport}/", tmp_path, "--dump-dom").stdout.decode()
    cells = _Cells()
    cells.feed(dom)
    assert "stale" in cells.banner["class"].split()
    assert "STALE: verdicts from" in dom and "connection refused" in dom
    assert cells.cells["node-2"]["data-state"] == "failing"  # the last verdicts, still shown
    assert 'class="grid stale"' in dom


def test_browser_with_the_token_as_basic_password_sees_the_data(tmp_path: Path):
    app = create_app(ServiceSettings(run_analysis=False, token="page-token"), ScriptedAnalyze())
    assert app.state.runner.run_once()
    with serving(app) as hostport:
        denied = chromium(f"http://{hostport}/", tmp_path, "--dump-dom").stdout.decode()
        assert 'id="grid"' not in denied  # 401: no page without the token
        dom = chromium(f"http://me:page-token@{hostport}/", tmp_path, "--dump-dom").stdout.decode()
    cells = _Cells()
    cells.feed(dom)
    # The page's own fetch() calls carried the credentials: the grid was filled from the API.
    assert sorted(cells.cells) == ["node-1", "node-2", "node-3", "node-4"]
    assert 'value="4711"' in dom  # the job selector
    # The straggler chart: one bar per rank, rank 5 (score 1.31) drawn as the straggler.
    assert dom.count('class="bar') == 32 and dom.count('class="bar straggler"') == 1
    assert "rank 5 (node-1 GPU 5): 1.310" in dom


def test_a_sharded_replica_says_which_share_it_shows(tmp_path: Path):
    from fleetscope.service.live import LiveResult
    from tests.service.support import make_analysis

    shard = {
        "index": 1,
        "count": 3,
        "jobs": 1,
        "models": 0,
        "nodes": 4,
        "fleet_jobs": 3,
        "fleet_models": 0,
        "fleet_nodes": 11,
    }
    result = LiveResult(make_analysis(), shard=shard)
    app = create_app(ServiceSettings(run_analysis=False, shard=(1, 3)), ScriptedAnalyze(result))
    assert app.state.runner.run_once()
    with serving(app) as hostport:
        dom = chromium(f"http://{hostport}/", tmp_path, "--dump-dom").stdout.decode()
    assert '<span id="shard">shard 1 of 3, owning 1 of 3 jobs / 4 of 11 nodes</span>' in dom, dom[:2000]
    # Unsharded, the line stays hidden and empty.
    with serving(create_app(ServiceSettings(run_analysis=False), ScriptedAnalyze())) as hostport:
        dom = chromium(f"http://{hostport}/", tmp_path, "--dump-dom").stdout.decode()
    assert '<span id="shard" hidden=""></span>' in dom
