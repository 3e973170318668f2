"""``analyze --input`` of an OpenMetrics recording longer than two hours streams it by default
(``--chunk auto``: converted to an archive on the way, analyzed an hour at a time), with the
findings of the one-shot analysis; a shorter one is still analyzed in one piece."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetscope.analyzers.analyze_source import analyze_source
from fleetscope.analyzers.config import DEFAULT
from fleetscope.analyzers.core import LOADED
from fleetscope.simulate.record import write_scenario
from fleetscope.simulate.spec import FaultSpec, ScenarioSpec
from fleetscope.window.sources import RecordingSource
from tests.support.findings import assert_same_findings


def _recording(tmp_path: Path, hours: float) -> Path:
    spec = ScenarioSpec(
        name=f"auto_{hours}",
        nodes=4,
        efa_per_node=1,
        duration_s=hours * 3600,
        faults=[FaultSpec(kind="gpu_lost", at_s=hours * 3600 * 0.6, node=1, gpu=1)],
    )
    out, _ = write_scenario(spec, tmp_path / f"r{hours}.om")
    return out


def _run(source: RecordingSource, chunk: str) -> tuple[dict, list[str]]:
    labels: list[str] = []

    def bars(label: str):
        labels.append(label)
        return lambda done: None

    return analyze_source(source, DEFAULT, bars, chunk=chunk).document(), labels


@pytest.mark.slow
def test_a_long_recording_streams_by_default_with_the_same_findings(tmp_path: Path) -> None:
    source = RecordingSource(_recording(tmp_path, 2.5), LOADED)
    seconds = source.first_family_seconds()
    assert seconds is not None and 2.5 * 3600 - 60 <= seconds <= 2.5 * 3600
    streamed, labels = _run(source, "auto")
    assert labels == ["converting", "analyzing"]  # converted to an archive, then analyzed in chunks
    one, one_labels = _run(source, "off")
    assert one_labels == ["loading"]
    assert any(f["kind"] == "failing_node" for f in one["findings"]), one["findings"]
    assert_same_findings(one, streamed)


def test_a_short_recording_stays_one_piece(tmp_path: Path) -> None:
    source = RecordingSource(_recording(tmp_path, 1.0), LOADED)
    _, labels = _run(source, "auto")
    assert labels == ["loading"]
