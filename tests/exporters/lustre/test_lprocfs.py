"""The generic lprocfs stats parser, on real files (2.10, 2.14) and on the edge cases of the format."""

from __future__ import annotations

import pytest

from fleetscope.exporters.lprocfs import Counter, parse_stats, units_per_second
from tests.conftest import FIXTURES
from tests.exporters.lustre.lctl_dump import parse_dump

FIX = FIXTURES / "lustre"
P210 = FIX / "2.10" / "proc" / "fs" / "lustre"


def test_real_210_llite_stats() -> None:
    stats = parse_stats((P210 / "llite" / "lustrefs-ffff88105db50000" / "stats").read_text())
    assert stats.problems == []
    assert stats.snapshot_time == pytest.approx(1510950459.772792457)
    assert stats.start_time is None and stats.elapsed_time is None
    assert stats.counters["read_bytes"] == Counter("read_bytes", 1, "bytes", 4194304, 4194304, 4194304, None)
    assert stats.counters["write_bytes"].sum == 93813797294080
    assert stats.counters["write_bytes"].samples == 89467810
    assert stats.counters["open"] == Counter("open", 136, "regs")
    assert list(stats.counters) == [
        "read_bytes",
        "write_bytes",
        "open",
        "close",
        "readdir",
        "truncate",
        "getattr",
        "alloc_inode",
        "getxattr",
        "getxattr_hits",
        "removexattr",
        "inode_permission",
    ]


def test_real_210_osc_stats_usec_and_sumsq_above_2_63() -> None:
    stats = parse_stats((P210 / "osc" / "lustrefs-OST0000-osc-ffff88105db50000" / "stats").read_text())
    assert stats.problems == []
    wb = stats.counters["write_bytes"]
    assert wb.sumsq == 10009909738331963392 > 2**63
    wait = stats.counters["req_waittime"]
    assert (wait.unit, wait.samples, wait.min, wait.max, wait.sum) == (
        "usec",
        18215581,
        69,
        1348857,
        110282569237,
    )
    assert stats.counters["req_active"].unit == "reqs"


def test_real_210_md_stats_and_empty_read_ahead() -> None:
    md = parse_stats((P210 / "mdc" / "lustrefs-MDT0000-mdc-ffff88105db50000" / "md_stats").read_text())
    assert {n: c.samples for n, c in md.counters.items()} == {
        "close": 11,
        "getattr": 1,
        "intent_lock": 329,
        "setattr": 134,
        "read_page": 6,
    }
    ra = parse_stats((P210 / "llite" / "lustrefs-ffff88105db50000" / "read_ahead_stats").read_text())
    assert ra.counters == {} and ra.problems == [] and ra.snapshot_time is not None


def test_real_214_llite_usecs() -> None:
    text = parse_dump((FIX / "2.14" / "llite_client.txt").read_text())["llite.ai400x2-ff47bce9ca35d800.stats"]
    stats = parse_stats(text)
    assert stats.problems == []
    assert stats.counters["open"] == Counter("open", 35955554, "usecs", 0, 172939, 3393651645, 8836730033307)
    assert stats.counters["ioctl"] == Counter("ioctl", 114, "reqs")
    assert stats.counters["openclosetime"].sumsq == 2084188699388296969
    assert len(stats.counters) == 14


def test_header_lines_with_and_without_colon() -> None:
    text = (
        "snapshot_time:            1716295737.291444030 secs.nsecs\n"
        "start_time               1715767600.564021089 secs.nsecs\n"
        "elapsed_time:            528136.727422941 secs.nsecs\n"
        "getattr                   6 samples [usecs] 408 449 2555 1088895\n"
    )
    stats = parse_stats(text)
    assert stats.problems == []
    assert stats.snapshot_time == pytest.approx(1716295737.291444030)
    assert stats.start_time == pytest.approx(1715767600.564021089)
    assert stats.elapsed_time == pytest.approx(528136.727422941)
    assert stats.counters["getattr"].sumsq == 1088895


def test_histogram_style_snapshot_header() -> None:
    stats = parse_stats("snapshot_time:         1510950459.783304874 (secs.nsecs)\nhits 3 samples [pages]\n")
    assert stats.problems == [] and stats.snapshot_time == pytest.approx(1510950459.783304874)


def test_names_with_spaces_read_ahead_stats() -> None:
    text = (
        "snapshot_time             1700000000.124000111 secs.nsecs\n"
        "hits                      41200 samples [pages]\n"
        "readpage not consecutive  12 samples [pages]\n"
        "hit max r-a issue         7 samples [pages]\n"
        "read-ahead to EOF         1190 samples [pages]\n"
        "wrong page from grab_cache_page 1 samples [pages]\n"
    )
    stats = parse_stats(text)
    assert stats.problems == []
    assert {n: c.samples for n, c in stats.counters.items()} == {
        "hits": 41200,
        "readpage not consecutive": 12,
        "hit max r-a issue": 7,
        "read-ahead to EOF": 1190,
        "wrong page from grab_cache_page": 1,
    }


def test_units_are_kept_verbatim_and_time_units_scale() -> None:
    text = (
        "a 1 samples [regs]\nb 1 samples [reqs]\nc 2 samples [usec] 1 3 4\n"
        "d 2 samples [usecs] 1 3 4 10\ne 1 samples [bytes] 5 5 5\n"
    )
    stats = parse_stats(text)
    assert [c.unit for c in stats.counters.values()] == ["regs", "reqs", "usec", "usecs", "bytes"]
    assert units_per_second("usec") == units_per_second("usecs") == 1_000_000
    assert units_per_second("regs") is None and units_per_second("reqs") is None
    assert units_per_second("bytes") is None


def test_truncated_file_drops_only_the_cut_line() -> None:
    full = (P210 / "llite" / "lustrefs-ffff88105db50000" / "stats").read_text()
    cut = full[
        : full.index("write_bytes") + len("write_bytes               89467810 samples [bytes] 4096 10")
    ]
    stats = parse_stats(cut)
    assert [p.reason for p in stats.problems] == ["truncated"]
    assert stats.problems[0].line.startswith("write_bytes")
    assert list(stats.counters) == ["read_bytes"]  # the cut number never passes as a value


def test_malformed_lines_are_reported_and_good_lines_kept() -> None:
    text = (
        "snapshot_time             1510950459.772792457 secs.nsecs\n"
        "open                      136 samples [regs]\n"
        "close                     lots samples [regs]\n"
        "getattr                   41 samples [regs] 1 2\n"
        "garbage\n"
        "\n"
        "readdir                   12 samples [regs]\n"
        "open                      137 samples [regs]\n"
    )
    stats = parse_stats(text)
    assert {n: c.samples for n, c in stats.counters.items()} == {"open": 136, "readdir": 12}
    assert [(p.line_no, p.reason) for p in stats.problems] == [
        (3, "malformed"),
        (4, "malformed"),
        (5, "malformed"),
        (8, "duplicate"),
    ]


def test_empty_text_is_reported() -> None:
    stats = parse_stats("")
    assert stats.counters == {} and [p.reason for p in stats.problems] == ["empty"]


def test_zero_sample_lines_would_parse_and_negative_min_is_allowed() -> None:
    stats = parse_stats("x 0 samples [usecs] -1 0 0 0\n")
    assert stats.counters["x"] == Counter("x", 0, "usecs", -1, 0, 0, 0)
