"""A long window on a young Prometheus (issue: the README's ``--start=-6h`` against the demo's
minutes of data): a window is an error only when it holds no data at all. Chunks without data are
skipped and said once on stderr, for ``analyze --prometheus``, ``record --prometheus`` and
``analyze --input`` of that archive; a real Prometheus holds the last 20 minutes of a scenario."""

from __future__ import annotations

import json
import time

import pytest

from fleetscope.cli import main
from fleetscope.simulate.record import write_scenario
from fleetscope.simulate.spec import FaultSpec, ScenarioSpec, node_name
from tests.support.findings import assert_same_findings
from tests.support.prom import Prometheus, backfill_openmetrics

pytestmark = [pytest.mark.server]

DURATION_S = 1200


@pytest.fixture(scope="module")
def young(tmp_path_factory):
    """A Prometheus whose only data are the last 20 minutes (ending a minute ago), with a lost GPU."""
    tmp = tmp_path_factory.mktemp("young")
    start = float(int(time.time()) - DURATION_S - 60)
    spec = ScenarioSpec(
        name="young",
        nodes=2,
        duration_s=DURATION_S,
        seed=7,
        start=start,
        faults=[FaultSpec(kind="gpu_lost", at_s=600, node=1, gpu=3)],
    )
    out, _ = write_scenario(spec, tmp / "young.om")
    backfill_openmetrics(out, tmp / "data")
    with Prometheus(tmp / "p", data_dir=tmp / "data") as p:
        yield p, tmp


def _run(args: list[str], capsys) -> tuple[int, str, str]:
    rc = main([*args, "--no-progress"])
    out, err = capsys.readouterr()
    return rc, out, err


def _skipped(err: str) -> list[str]:
    return [line for line in err.splitlines() if "with no data" in line]


def test_a_window_that_starts_hours_before_the_data(young, capsys) -> None:
    prom, tmp = young
    rc, out, err = _run(
        ["analyze", "--prometheus", prom.url, "--start=-6h", "--end=now", "--format", "json"], capsys
    )
    assert rc == 0, err
    (said,) = _skipped(err)  # once, however many chunks were empty
    assert said.startswith("fleetscope: skipped ") and " of 6 chunks with no data " in said, said
    doc = json.loads(out)
    assert ("failing_node", node_name(1)) in {(f["kind"], f["node"]) for f in doc["findings"]}, doc[
        "findings"
    ]
    # the same findings as the window analyzed in one piece (which never needed to skip)
    rc, whole, err = _run(
        [
            "analyze",
            "--prometheus",
            prom.url,
            "--start=-6h",
            "--end=now",
            "--chunk",
            "off",
            "--format",
            "json",
        ],
        capsys,
    )
    assert rc == 0 and not _skipped(err), err
    assert_same_findings(json.loads(whole), doc)

    archive = tmp / "six-hours.parquet"
    rc, _, err = _run(
        ["record", "--prometheus", prom.url, "--start=-6h", "--end=now", "-o", str(archive)], capsys
    )
    assert rc == 0, err
    (said,) = _skipped(err)  # the hours before the data, and the last grid time (a piece of its own)
    assert " of 7 pieces with no data (" in said and said.count(" to ") == 2, said
    assert f"wrote {archive}:" in err

    rc, out, err = _run(["analyze", "--input", str(archive), "--format", "json"], capsys)
    assert rc == 0, err
    assert len(_skipped(err)) == 1, err
    assert_same_findings(json.loads(out), doc)


def test_a_window_without_any_data_is_one_error_line(young, capsys) -> None:
    prom, tmp = young
    said = {
        f"Prometheus at {prom.url} has no data between ": [
            "analyze",
            "--prometheus",
            prom.url,
            "--format",
            "json",
        ],
        f"Prometheus at {prom.url} has no fleetscope series between ": [
            "record",
            "--prometheus",
            prom.url,
            "-o",
            str(tmp / "empty.parquet"),
        ],
    }
    for message, cmd in said.items():
        rc, out, err = _run([*cmd, "--start=-6h", "--end=-3h"], capsys)
        assert rc == 1 and out == "" and err.startswith(f"fleetscope: error: {message}"), err
        assert len(err.strip().splitlines()) == 1, err
    assert not (tmp / "empty.parquet").exists()
