"""A rank label that is no index (``²``, ``٣``, 400 nines) skips its series with one warning; the
cycle, ``analyze`` and the other ranks' findings go on (issue 26, item 8)."""

from __future__ import annotations

import json
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetscope.cli import main
from fleetscope.labels import MAX_RANK, parse_index
from fleetscope.simulate.record import write_scenario
from fleetscope.simulate.spec import FaultSpec, ScenarioSpec


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    spec = ScenarioSpec(
        name="ranks",
        nodes=2,
        duration_s=1200,
        seed=3,
        faults=[
            FaultSpec(kind="gpu_lost", at_s=600, node=1, gpu=3, restart="replace"),
        ],
    )
    out, _ = write_scenario(spec, tmp_path_factory.mktemp("rec") / "r.om")
    return out


def _key(finding: dict) -> tuple:
    return (finding["kind"], finding.get("node"), finding.get("gpu"), finding.get("rank"))


def _analyze(path, capsys) -> tuple[dict, str]:
    rc = main(["analyze", "--input", str(path), "--format", "json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "Traceback" not in err
    return json.loads(out), err


@pytest.mark.parametrize("rank", ["²", "٣", "9" * 400, "1e3"])
def test_a_rank_that_is_no_index_skips_one_series(recording, tmp_path, capsys, caplog, rank) -> None:
    clean, _ = _analyze(recording, capsys)
    path = tmp_path / "bad.om"
    path.write_text(recording.read_text().replace('rank="0"', f'rank="{rank}"'))
    with caplog.at_level(logging.WARNING):
        report, _ = _analyze(path, capsys)
    warned = [
        r.getMessage() for r in caplog.records if "rank label is not an ASCII integer" in r.getMessage()
    ]
    assert warned and warned[0].startswith("skipped 1 rank series")
    # The failing node (another rank) is found as in the clean recording.
    assert any(f["kind"] == "failing_node" for f in clean["findings"])
    assert sorted(map(_key, report["findings"])) == sorted(map(_key, clean["findings"]))


@settings(max_examples=300, derandomize=True, deadline=None)
@given(st.one_of(st.text(max_size=12), st.integers(min_value=-5, max_value=2 * MAX_RANK)))
def test_parse_index_takes_only_ascii_digits_within_the_bound(value) -> None:
    got = parse_index(value, MAX_RANK)
    if got is None:
        return
    assert 0 <= got < MAX_RANK
    if isinstance(value, str):
        assert value.isascii() and value.isdigit() and int(value) == got


@pytest.mark.parametrize("xid", ["²", "1e400", "9" * 400])
def test_an_xid_that_is_no_index_skips_one_series(recording, tmp_path, capsys, caplog, xid) -> None:
    clean, _ = _analyze(recording, capsys)
    text = recording.read_text()
    stamps = sorted(
        {line.rsplit(" ", 1)[1] for line in text.splitlines() if line.startswith("DCGM_FI_DEV_GPU_UTIL{")}
    )
    labels = f'gpu="0",Hostname="ip-10-1-0-10",xid="{xid}"'
    block = "# TYPE fleetscope_gpu_xid_errors counter\n" + "".join(
        f"fleetscope_gpu_xid_errors_total{{{labels}}} {i} {t}\n" for i, t in enumerate(stamps)
    )
    path = tmp_path / "xid.om"
    path.write_text(text.replace("# EOF", block + "# EOF"))
    with caplog.at_level(logging.WARNING):
        report, _ = _analyze(path, capsys)
    assert any("xid label" in r.getMessage() for r in caplog.records)
    assert sorted(map(_key, report["findings"])) == sorted(map(_key, clean["findings"]))
