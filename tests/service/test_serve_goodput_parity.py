"""``serve`` with the demo's grid (``--step 5 --window 900``) gives the goodput account ``analyze``
gives on the same data: a job history the real training library writes (a save, a failure, the
restart resuming from the save), backfilled into a real Prometheus, read by the live service's
sliding window cycle after cycle, and by a one-shot ``analyze --prometheus`` over the very window
the service analyzed. The demo's page once showed a restart and recovery time before any fault
that ``analyze`` did not report."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from fleetscope.analyzers.report import GOODPUT_CATEGORIES
from fleetscope.cli import main
from tests.analyzers.goodput_histories import History
from tests.service.support import ServeProcess
from tests.support.prom import Prometheus, backfill_openmetrics, http_get, wait_for

pytestmark = [pytest.mark.server]

#: The history ends this long before the test starts: the service's 900 s window holds all of it
#: for the first minutes of the test.
AGO_S = 45.0


def _history(origin: float) -> History:
    h = History(nodes=4, seed=21, scrape=(15.0, 15.0), jitter_s=0.5, miss=0.0, origin=origin)
    return h.run_for(150).save(30).run_for(120).fail(60).run_for(150)


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("parity")
    length = _history(0.0).t  # the same script, seed for seed: its length
    assert length + AGO_S <= 900 - 150, length
    h = _history(time.time() - AGO_S - length)
    h.write(tmp / "h.om")
    backfill_openmetrics(tmp / "h.om", tmp / "data")
    with Prometheus(tmp / "p", data_dir=tmp / "data") as p:
        yield p


def _served(serve: ServeProcess, cycles_after: float) -> dict | None:
    status, body = http_get(f"{serve.url}/api/v1/jobs/4711/goodput", timeout=10)
    if status != 200:
        return None
    doc = json.loads(body)
    return doc if (doc["status"]["analyzed_at"] or 0) >= cycles_after else None


def _shares(g: dict) -> dict[str, float]:
    return {k: g["gpu_seconds"][k] / (g["whole_gpu_hours"] * 3600) for k in GOODPUT_CATEGORIES}


def test_serve_at_the_demos_step_gives_analyzes_account(history, tmp_path: Path, capsys) -> None:
    prom = history
    serve = ServeProcess(prom.url, "--window", "900", "--step", "5", "--interval", "0.5", workdir=tmp_path)
    try:
        serve.start(timeout=60)
        first = wait_for(lambda: _served(serve, 0), timeout=60, what="the service's first account")
        # A few cycles later the sliding window has been moved and topped up several times.
        later = time.time() + 3
        doc = wait_for(lambda: _served(serve, later), timeout=60, what="an account cycles later")
    finally:
        serve.stop()
    live = doc["goodput"]
    assert main(
        [
            "analyze",
            "--prometheus",
            prom.url,
            "--start",
            doc["window"]["start"],
            "--end",
            doc["window"]["end"],
            "--step",
            "5",
            "--format",
            "json",
            "--no-progress",
        ]
    ) in (0, 1)
    once = json.loads(capsys.readouterr().out)["goodput"]["4711"]

    # One failure, counted once, by both; no restart before it.
    assert live["restarts"] == once["restarts"] == first["goodput"]["restarts"] == 1
    assert live["whole_gpu_hours"] == pytest.approx(once["whole_gpu_hours"], rel=0.01)
    for k, v in _shares(live).items():
        assert v == pytest.approx(_shares(once)[k], abs=0.005), (k, live, once)
    # Whether the account is right is for the long histories of
    # tests/analyzers/test_goodput_histories.py: ten minutes of a job are mostly its edges.
    assert live["gpu_hours"]["recovery"] > 0 and live["gpu_hours"]["rework"] > 0
