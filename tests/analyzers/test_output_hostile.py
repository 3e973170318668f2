"""``analyze`` output against hostile names and a full disk (issue 26, item 17)."""

from __future__ import annotations

import errno
import os

import pytest

from fleetscope import atomicfile
from fleetscope.cli import main
from fleetscope.simulate.record import write_scenario
from fleetscope.simulate.spec import FaultSpec, ScenarioSpec


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    spec = ScenarioSpec(
        name="out",
        nodes=2,
        duration_s=1200,
        seed=5,
        faults=[
            FaultSpec(kind="gpu_lost", at_s=600, node=1, gpu=3, restart="replace"),
        ],
    )
    out, _ = write_scenario(spec, tmp_path_factory.mktemp("rec") / "r.om")
    return out


def test_dollar_signs_in_node_names_and_job_ids_render_as_text(recording, tmp_path, capsys) -> None:
    """matplotlib reads ``$...$`` as mathtext: ``$`` in a node name crashed ``--format html``."""
    text = recording.read_text()
    node = next(part.split('"')[1] for part in text.split("Hostname=")[1:2])
    bad = tmp_path / "dollar.om"
    bad.write_text(text.replace(node, "n$1$_{x}^").replace('job_id="4711"', 'job_id="$\\\\frac{a}{$"'))
    out = tmp_path / "r.html"
    assert main(["analyze", "--input", str(bad), "--format", "html", "-o", str(out)]) == 0
    _, err = capsys.readouterr()
    assert "Traceback" not in err
    page = out.read_text()
    assert page.count("data:image/png;base64,") == 3


def test_output_is_written_whole_or_not_at_all(recording, tmp_path, capsys, monkeypatch) -> None:
    out = tmp_path / "report.json"
    out.write_text("the previous report\n")

    def full_disk(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(atomicfile.os, "fsync", full_disk)
    assert main(["analyze", "--input", str(recording), "--format", "json", "-o", str(out)]) == 1
    _, err = capsys.readouterr()
    assert f"cannot write {out}: No space left on device" in err and "Traceback" not in err
    assert out.read_text() == "the previous report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]  # no temporary file left
    monkeypatch.undo()
    assert main(["analyze", "--input", str(recording), "--format", "json", "-o", str(out)]) == 0
    assert out.read_text().startswith("{")
