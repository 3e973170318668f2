"""Streaming analysis (fleetscope.analyzers.stream) against one-shot analysis, and its merge rules.

The comparison runs scenarios whose incidents cross a chunk boundary (15-minute chunks over 30 to
45 minutes): a straggler, a lost GPU, a hang whose cause came before the chunk's view, a monitoring
gap and a drain across the boundary, an MFU drop, a CPU straggler slow through a whole chunk, a
goodput account with a straggler. The full corpus is compared in docs/benchmarks.md#streaming.
"""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path

import pytest

from fleetscope.analyzers.config import DEFAULT
from fleetscope.analyzers.core import LOADED, analyze
from fleetscope.analyzers.findings import Finding
from fleetscope.analyzers.report import Report
from fleetscope.analyzers.stream import (
    analyze_chunked,
    chunk_seconds,
    merge_findings,
    plan_chunks,
    subject,
)
from fleetscope.errors import FleetscopeError
from fleetscope.window.frames import slice_frames
from tests.support.analysis import load_file

SCENARIOS = Path(__file__).resolve().parents[1] / "fixtures" / "scenarios"
CROSSING = [
    "thermal_throttle_16n_s12",
    "gpu_lost_8n_s32",
    "hang_16n_s123_vanish",
    "membership_4n_s163_gap",
    "membership_8n_s161_drain",
    "data_stall_4n_s84_10pct",
    "node_level_4n_s153_cpu",
    "goodput_8n_s184_straggler",
]
#: Time resolution of a finding's start and end: the rate window every signal is read over.
RESOLUTION_S = DEFAULT.rate_window_s
#: One fact, two names: a GPU whose series stopped is ``gpu_lost`` to the failing-node detector
#: and ``gpu_missing`` as a hang's root cause; which one a window keeps depends on whether it holds
#: the hang's end (docs/analyzers.md#streaming).
SAME_CAUSE = {"gpu_missing": "gpu_lost"}


def _frames(name: str, tmp_path: Path):
    from fleetscope.simulate.record import write_scenario
    from fleetscope.simulate.spec import ScenarioSpec

    out, _truth = write_scenario(ScenarioSpec.load(SCENARIOS / f"{name}.json"), tmp_path / f"{name}.om")
    return load_file(out, LOADED)


def _by_subject(findings: list[Finding]) -> dict[tuple, Finding]:
    out = {}
    for f in findings:
        assert (subject(f), f.severity) not in out, f"two findings of one subject: {f}"
        out[(subject(f), f.severity)] = f
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", CROSSING)
def test_chunked_findings_equal_one_shot(name: str, tmp_path: Path) -> None:
    frames = _frames(name, tmp_path)
    one = analyze(frames)
    streamed = analyze_chunked(
        lambda a, b: slice_frames(frames, a, b),
        frames.start,
        frames.end,
        frames.step,
        chunk_s=900,
        lead_s=900,
    )
    assert len(plan_chunks(frames.start, frames.end, frames.step, 900, 900)) >= 2
    a, b = _by_subject(one.findings), _by_subject(streamed.findings)
    assert a.keys() == b.keys()
    assert one.findings, "each scenario has something to find"
    for k, fa in a.items():
        fb = b[k]
        assert abs(fa.start - fb.start) <= RESOLUTION_S, (k, fa.start - frames.start, fb.start - frames.start)
        assert (fa.end is None) == (fb.end is None), (k, fa.end, fb.end)
        if fa.end is not None and fb.end is not None:
            assert abs(fa.end - fb.end) <= RESOLUTION_S, k
        assert SAME_CAUSE.get(fa.cause, fa.cause) == SAME_CAUSE.get(fb.cause, fb.cause), k
    assert {n: v.state for n, v in one.nodes.items()} == {n: v.state for n, v in streamed.nodes.items()}
    for job, acct in one.goodput.items():
        other = streamed.goodput[job]
        assert sum(other.gpu_seconds.values()) == pytest.approx(other.whole_gpu_seconds, rel=1e-9)
        assert other.whole_gpu_seconds == pytest.approx(acct.whole_gpu_seconds, rel=0.005)
        assert sum(other.gpu_seconds.values()) == pytest.approx(other.whole_gpu_seconds, rel=1e-9)
        assert other.gpu_seconds["productive"] == pytest.approx(acct.gpu_seconds["productive"], rel=0.02)


def test_a_drop_through_a_whole_chunk_is_measured_against_the_level_before(tmp_path: Path) -> None:
    """Without the carried baseline a chunk that opens in a drop reads it as a warm-up."""
    frames = _frames("data_stall_4n_s84_10pct", tmp_path)
    one = [f for f in analyze(frames).findings if f.kind == "mfu_drop"]
    assert one and one[0].end is None
    late = slice_frames(frames, one[0].start + 300, frames.end)
    assert not [f for f in analyze(late).findings if f.kind == "mfu_drop"]
    from fleetscope.analyzers.carry import Carry

    carried = analyze(slice_frames(frames, frames.start, one[0].start - 60)).carry
    assert isinstance(carried, Carry) and carried.mfu_base
    assert [f for f in analyze(late, carry=carried).findings if f.kind == "mfu_drop"]


def test_plan_tiles_the_grid_and_joins_a_short_tail() -> None:
    plan = plan_chunks(0.0, 3600.0, 15.0, 900.0, 600.0)
    owns = [(a, b) for _, a, b in plan]
    assert owns[0][0] == 0.0 and owns[-1][1] == 3600.0
    assert all(b2 == a1 - 15.0 for (_, b2), (a1, _) in pairwise(owns))
    assert [ls for ls, _, _ in plan] == [0.0, 300.0, 1200.0, 2100.0]
    # 3615 s: one grid time past 3600 joins the last chunk instead of being a chunk of its own.
    assert len(plan_chunks(0.0, 3615.0, 15.0, 900.0, 600.0)) == 4


def test_chunk_argument() -> None:
    assert chunk_seconds("off", 10 * 86400) is None
    assert chunk_seconds("auto", 3600) is None
    assert chunk_seconds("auto", 6 * 3600) == 3600
    assert chunk_seconds("auto", None) is None
    assert chunk_seconds("30m", None) == 1800
    with pytest.raises(FleetscopeError, match="--chunk"):
        chunk_seconds("0", 3600)
    with pytest.raises(FleetscopeError, match="duration"):
        chunk_seconds("an hour", 3600)


def _f(kind: str, node: str | None, start: float, end: float | None, gpu: str | None = None, **kw) -> Finding:
    return Finding(
        kind=kind,
        severity=kw.pop("severity", "warning"),
        node=node,
        start=start,
        cause=kw.pop("cause", "x"),
        action="",
        gpu=gpu,
        end=end,
        **kw,
    )


def _report(findings: list[Finding]) -> Report:
    return Report(start=0.0, end=1.0, findings=findings)


def test_merge_continues_withdraws_and_closes() -> None:
    running = _f("straggler", "n1", 400.0, None, job_id="j")
    edge = _f("membership_change", "n2", 850.0, None, severity="info")  # absent to the chunk's end
    lost = _f("failing_node", "n3", 50.0, None, severity="critical")
    old = _f("straggler", "n4", 10.0, None, job_id="j")
    # The next chunk (view from 300, own from 900) saw n1's onset too: its straggler goes on, named
    # after the GPU this chunk found;
    # n2 came back (a gap, not a departure); n3 and n4 are not found again.
    nxt = [_f("straggler", "n1", 400.0, None, gpu="3", job_id="j", cause="thermal")]
    out = merge_findings([running, edge, lost, old], _report(nxt), own_start=900.0, load_start=300.0)
    assert edge not in out
    s = next(f for f in out if f.node == "n1")
    assert (s.start, s.end, s.gpu, s.cause) == (400.0, None, "3", "thermal")
    # n3's and n4's onsets lie before the chunk's view. Without features the chunk's subjects are
    # unknown, so they may still be there: kept open.
    assert lost in out and old in out
    assert lost.end is None and old.end is None


def test_merge_folds_a_hang_into_a_failure_found_before() -> None:
    lost = _f("failing_node", "n3", 50.0, None, severity="critical")
    gap = _f("membership_change", "n3", 400.0, None, severity="info")
    out = merge_findings([lost], _report([gap]), own_start=900.0, load_start=300.0)
    assert out == [lost]


def test_chunked_report_is_the_document_shape(tmp_path: Path) -> None:
    frames = _frames("gpu_lost_8n_s32", tmp_path)
    streamed = analyze_chunked(
        lambda a, b: slice_frames(frames, a, b),
        frames.start,
        frames.end,
        frames.step,
        chunk_s=600,
        lead_s=900,
    )
    doc = json.loads(json.dumps(streamed.document()))
    assert doc["window"]["start"] == analyze(frames).document()["window"]["start"]
    assert any(f["kind"] == "failing_node" and f["end"] is None for f in doc["findings"])
