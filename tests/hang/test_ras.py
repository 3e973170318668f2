"""NCCL RAS reports: every shared sample names its behind / missing ranks, a healthy one names
none; polls turn a suspect into a confirmed hang; frozen equal counts name no rank."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleetscope.hang.ras_parse import RasParseError, load_reports, parse_reports, repair_json, status_request
from fleetscope.hang.ras_reason import analyze_reports
from tests.hang.builders import RAS, ras_report


def _analyze(path: Path, confirm: float = 60.0):
    reports, notes = load_reports(path)
    hangs, more = analyze_reports(reports, confirm)
    return hangs, notes + more


#: file -> the ranks named (None: a process named by node/GPU), the reason, confirmed
EXPECTED = {
    "ray_test_healthy.json": None,
    "doc_text_comms_ok.txt": None,
    "doc_text_job_summary.txt": None,
    "ray_test_multi_comm_one_mismatched.json": ({1}, "not_launched", False),
    "ray_test_missing_rank_malformed_2.28.9.json": ({1}, "dead", False),
    "doc_json_missing_rank.json": ({1}, "dead", False),
    "doc_text_warning_mismatch_opcount.txt": ({0, 2, 3, 4, 5, 7}, "not_launched", False),
    "doc_text_incomplete_missing_rank.txt": ({21}, "dead", False),
    "doc_text_dead_process.txt": ({21}, "dead", True),
    "doc_monitor_peer_dead.json": ({None}, "dead", True),
    "doc_monitor_peer_dead.txt": ({None}, "dead", True),
    "doc_text_comms_finalize_transition.txt": None,
}


def test_every_shared_report_is_covered() -> None:
    assert {p.name for p in RAS.iterdir() if not p.name.startswith("LICENSE")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_shared_report(name: str) -> None:
    hangs, _ = _analyze(RAS / name)
    want = EXPECTED[name]
    if want is None:
        assert hangs == []
        return
    ranks, reason, confirmed = want
    assert {r.rank for h in hangs for r in h.waiting_for} == ranks
    assert {h.reason for h in hangs} == {reason}
    assert all(h.confirmed is confirmed for h in hangs)


def test_the_malformed_2_28_9_json_is_repaired_and_said_so() -> None:
    text = (RAS / "ray_test_missing_rank_malformed_2.28.9.json").read_text()
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    json.loads(repair_json(text))
    _, notes = _analyze(RAS / "ray_test_missing_rank_malformed_2.28.9.json")
    assert any("repaired" in n for n in notes)
    ok = (RAS / "ray_test_healthy.json").read_text()
    assert json.loads(repair_json(ok)) == json.loads(ok)  # valid JSON is left as it is


def test_the_ranks_behind_not_the_ranks_ahead_and_the_nodes() -> None:
    (h,) = _analyze(RAS / "doc_text_warning_mismatch_opcount.txt")[0]
    assert h.seq == 6650 and h.waiting_for[0].host == "172.16.64.210"
    (h,) = _analyze(RAS / "ray_test_multi_comm_one_mismatched.json")[0]
    assert h.group == "0x4e0104c2022fa2f9" and h.seq == 4 and h.op == "nccl:all_reduce"
    assert (h.waiting_for[0].host, h.waiting_for[0].gpu) == ("10.0.77.184", "3")


def _polls(tmp: Path, reports: list[dict]) -> Path:
    p = tmp / "polls.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in reports) + "\n")
    return p


def test_a_skew_frozen_past_confirm_is_a_hang_and_one_that_moves_is_not(tmp_path: Path) -> None:
    frozen = [ras_report({0: 10, 1: 10, 2: 9}, ts=f"2026-06-19 06:5{m}:00") for m in (0, 1, 2)]
    (h,) = _analyze(_polls(tmp_path, frozen), confirm=90)[0]
    assert h.confirmed and h.reason == "not_launched" and {r.rank for r in h.waiting_for} == {2}
    (h,) = _analyze(_polls(tmp_path, frozen), confirm=600)[0]
    assert not h.confirmed and "< 600 s" in h.evidence[-1]
    moving = [ras_report({0: 10 + m, 1: 10 + m, 2: 9 + m}, ts=f"2026-06-19 06:5{m}:00") for m in (0, 1, 2)]
    (h,) = _analyze(_polls(tmp_path, moving), confirm=60)[0]
    assert not h.confirmed  # the skew of the last poll alone: a suspect


def test_equal_frozen_counts_say_launched_not_completed_and_name_no_rank(tmp_path: Path) -> None:
    polls = [ras_report({0: 7, 1: 7, 2: 7, 3: 7}, ts=f"2026-06-19 07:0{m}:00") for m in (0, 2)]
    (h,) = _analyze(_polls(tmp_path, polls))[0]
    assert h.reason == "launched_not_completed" and h.waiting_for == [] and h.confidence == "low"
    assert "NVIDIA/nccl#1730" in h.evidence[0]
    one = _polls(tmp_path, polls[:1])
    assert _analyze(one)[0] == []  # one report with equal counts is healthy


def test_dead_and_error_flags(tmp_path: Path) -> None:
    rep = ras_report({0: 5, 1: 5}, missing={2: True}, flags={1: {"async_error": 6}})
    p = tmp_path / "r.json"
    p.write_text(json.dumps(rep))
    hangs, _ = _analyze(p)
    by_reason = {h.reason: h for h in hangs}
    assert {r.rank for r in by_reason["dead"].waiting_for} == {2} and by_reason["dead"].confirmed
    assert {r.rank for r in by_reason["unknown"].waiting_for} == {1}
    assert "ncclRemoteError" in by_reason["unknown"].evidence[0]


def test_text_polls_with_times(tmp_path: Path) -> None:
    body = (RAS / "doc_text_warning_mismatch_opcount.txt").read_text()
    p = tmp_path / "polls.txt"
    p.write_text(f"# poll 2026-06-19T06:50:00Z\n{body}\n# poll 2026-06-19T06:52:00Z\n{body}")
    (h,) = _analyze(p)[0]
    assert h.confirmed and len(h.waiting_for) == 6


def test_not_a_report_is_one_clear_error(tmp_path: Path) -> None:
    for content, match in ((b"", "empty"), (b"\xff\xfe\x00", "not text"), (b"hello world", "neither"),
                           (b'{"a": 1}', "communicators")):  # fmt: skip
        p = tmp_path / "x"
        p.write_bytes(content)
        with pytest.raises(RasParseError, match=match):
            load_reports(p)
    with pytest.raises(RasParseError, match="not valid JSON"):
        parse_reports('{"communicators": [', "s")


def test_the_client_protocol_lines() -> None:
    assert status_request() == "TIMEOUT 5\nSET FORMAT json\nSTATUS\n"
