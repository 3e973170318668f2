"""``fleetscope analyze --chunk``: a recording and an archive streamed in chunks give the findings of
the one-shot analysis (the Prometheus path: tests/analyzers/test_identical.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleetscope.cli import main
from fleetscope.simulate.record import write_scenario
from fleetscope.simulate.spec import FaultSpec, ScenarioSpec
from tests.support.findings import assert_same_findings


@pytest.fixture(scope="module")
def recording(tmp_path_factory) -> Path:
    spec = ScenarioSpec(
        name="streamed",
        nodes=4,
        duration_s=2400,
        seed=21,
        faults=[
            FaultSpec(kind="thermal_throttle", at_s=500, node=1, gpu=2, slowdown=0.3),
            FaultSpec(kind="gpu_lost", at_s=1300, node=3, gpu=5),
        ],
    )
    out, _ = write_scenario(spec, tmp_path_factory.mktemp("rec") / "s.om")
    return out


def _analyze(capsys, *args: str) -> dict:
    assert main(["analyze", *args, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.slow
def test_recording_and_archive_streamed_give_the_one_shot_findings(recording: Path, tmp_path: Path, capsys):
    one = _analyze(capsys, "--input", str(recording))
    kinds = {(f["kind"], f["cause"]) for f in one["findings"]}
    assert ("straggler", "thermal_throttle") in kinds and ("failing_node", "gpu_lost") in kinds
    assert one == _analyze(capsys, "--input", str(recording), "--chunk", "off")
    # A recording is parsed once and spooled to $TMPDIR, then read a chunk at a time.
    streamed = _analyze(capsys, "--input", str(recording), "--chunk", "10m")
    assert streamed["window"] == one["window"]
    assert_same_findings(one, streamed)
    assert streamed["goodput"].keys() == one["goodput"].keys()
    archive = tmp_path / "incident.parquet"
    assert main(["record", "--input", str(recording), "-o", str(archive)]) == 0
    capsys.readouterr()
    from_archive = _analyze(capsys, "--input", str(archive), "--chunk", "10m")
    assert from_archive["window"] == one["window"]
    assert_same_findings(one, from_archive)
    # Loading the next chunk while this one is analyzed changes nothing in the report (4 chunks:
    # without --prefetch they load one after another).
    assert _analyze(capsys, "--input", str(archive), "--chunk", "10m", "--prefetch") == from_archive
    # The spool reads what the archive of the same recording reads: the same report, every field,
    # with the next chunk loaded on a second thread too.
    assert streamed == from_archive
    assert _analyze(capsys, "--input", str(recording), "--chunk", "10m", "--prefetch") == streamed


def test_bad_chunk_is_one_clear_line(recording: Path, capsys):
    assert main(["analyze", "--input", str(recording), "--chunk", "soon"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "duration" in err[0]
    assert "Traceback" not in err[0]
