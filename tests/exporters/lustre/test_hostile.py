"""Hostile Lustre inputs, as real files scraped over real HTTP: a FIFO, /dev/zero, 400 digits, 50 MB.

Each must leave the scrape answering 200 within its deadline, the other mount's and the other
collectors' series served, and the problem counted in ``fleetscope_collector_errors_total``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from fleetscope import contract
from fleetscope.exporters.base import NodeContext
from fleetscope.exporters.efa import EfaCollector
from fleetscope.exporters.lprocfs import parse_stats
from fleetscope.exporters.lustre import MAX_OPERATIONS, STATS_LIMIT, LustreCollector
from fleetscope.exporters.registry import NodeCollector
from fleetscope.exporters.server import ExporterServer
from fleetscope.exporters.webconfig import WebConfig
from tests.exporters.conftest import P5
from tests.exporters.lustre.helpers import LUSTRE, context
from tests.support.exposition import series
from tests.support.prom import http_get

HEADER = "snapshot_time             1764496800.512345678 secs.nsecs\n"
SCRATCH = "sys/kernel/debug/lustre/llite/ab12cdef-ffff9b8c51e6c800/stats"


def make_tree(tmp_path: Path) -> Path:
    from tests.exporters.conftest import copy_tree

    root = tmp_path / "t"
    copy_tree(LUSTRE / "2.15", root)
    return root


def scrape_over_http(root: Path) -> tuple[dict, float]:
    """One scrape of lustre (on ``root``) and efa (on the p5 tree) through the HTTP server."""
    lustre = LustreCollector(context(root))
    efa = EfaCollector(NodeContext(sysfs=P5 / "sys", node_name="n"))
    node = NodeCollector([lustre, efa], timeout=5.0)
    server = ExporterServer("127.0.0.1:0", node, WebConfig())
    server.start()
    try:
        start = time.monotonic()
        status, body = http_get(f"http://127.0.0.1:{server.port}/metrics", timeout=10)
        took = time.monotonic() - start
    finally:
        server.shutdown()
        node.close()
    assert status == 200, body[:200]
    return series(body.decode()), took


def errors(found: dict, reason: str) -> float | None:
    return found.get((contract.COLLECTOR_ERRORS, (("collector", "lustre"), ("reason", reason))))


def fsx_read_bytes(found: dict) -> list[float]:
    return [
        v
        for (name, labels), v in found.items()
        if name == contract.LUSTRE_CLIENT_READ_BYTES and ("mount", "/fsx") in labels
    ]


def scratch_series(found: dict) -> list:
    return [key for key in found if ("mount", "/scratch") in key[1]]


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda p: os.mkfifo(p), "not_regular_file"),  # open() without O_NONBLOCK waits for a writer forever
        (lambda p: p.symlink_to("/dev/zero"), "not_regular_file"),  # read() never ends
    ],
    ids=["fifo", "dev-zero"],
)
def test_stats_that_would_block_or_never_end_is_refused(tmp_path: Path, make, reason: str) -> None:
    root = make_tree(tmp_path)
    stats = root / SCRATCH
    stats.unlink()
    make(stats)
    found, took = scrape_over_http(root)
    assert took < 3.0
    assert errors(found, reason) == 1
    assert found[(contract.COLLECTOR_SUCCESS, (("collector", "lustre"),))] == 1
    assert fsx_read_bytes(found)  # the other mount is served
    assert not scratch_series(found)
    assert sum(1 for name, _ in found if name == contract.EFA_TX_BYTES) == 32  # and the other collectors


def test_a_400_digit_number_is_counted_not_a_failed_scrape(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    stats = root / SCRATCH
    text = stats.read_text().replace("4096 samples", "9" * 400 + " samples", 1)
    assert "9" * 400 in text
    stats.write_text(text)
    found, _ = scrape_over_http(root)
    assert errors(found, "stats_out_of_range") == 1
    assert fsx_read_bytes(found)
    assert sum(1 for name, _ in found if name == contract.EFA_TX_BYTES) == 32
    # The line is not used; no zero is invented for it (the file did not parse cleanly).
    assert not [k for k in scratch_series(found) if k[0] == contract.LUSTRE_CLIENT_READ_BYTES]


def test_numbers_beyond_what_the_kernel_prints_are_out_of_range() -> None:
    u64, s64 = 2**64 - 1, 2**63 - 1
    ok = f"a {u64} samples [reqs] 1 2 {s64} {u64}\n"
    assert not parse_stats(HEADER + ok).problems
    for bad in (
        f"a {u64 + 1} samples [reqs]\n",
        f"a 1 samples [usecs] 1 2 {s64 + 1}\n",
        f"a 1 samples [usecs] 1 2 3 {u64 + 1}\n",
        "a " + "1" * 5000 + " samples [reqs]\n",  # int() would raise past 4300 digits
        "snapshot_time " + "9" * 400 + " secs.nsecs\n",  # float() gives inf
        "read_bytes 5 samples [bytes] 1 4096 -20480\n",  # a negative sum would be exported as a counter
    ):
        stats = parse_stats(HEADER + bad)
        assert [p.reason for p in stats.problems] == ["out_of_range"], bad[:40]
        assert not stats.counters


def test_a_negative_sum_is_never_served_as_a_counter(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    stats = root / SCRATCH
    lines = stats.read_text().splitlines(keepends=True)
    i = next(k for k, line in enumerate(lines) if line.startswith("read_bytes"))
    lines[i] = "read_bytes                5 samples [bytes] 1 4096 -20480\n"
    stats.write_text("".join(lines))
    found, _ = scrape_over_http(root)
    assert errors(found, "stats_out_of_range") == 1
    assert not [k for k in scratch_series(found) if k[0] == contract.LUSTRE_CLIENT_READ_BYTES]
    assert all(
        v >= 0 for (name, _), v in found.items() if name.startswith("lustre_") and name.endswith("_total")
    )


def test_50_mb_of_operation_names_is_refused_quickly(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    stats = root / SCRATCH
    names = "\n".join(map("op{:08d}              1 samples [reqs]".format, range(1_400_000)))
    stats.write_text(HEADER + names + "\n")
    assert stats.stat().st_size > 50_000_000
    found, took = scrape_over_http(root)
    assert took < 3.0
    assert errors(found, "too_large") == 1
    assert fsx_read_bytes(found)
    assert len(found) < 2000  # no 1.4 M series


def test_distinct_names_under_the_byte_cap_are_cut_at_the_operation_limit(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    stats = root / SCRATCH
    lines = [f"op{i:06d} 7 samples [reqs]" for i in range(5000)]
    text = stats.read_text() + "\n".join(lines) + "\n"
    assert len(text) < STATS_LIMIT
    stats.write_text(text)
    found, _ = scrape_over_http(root)
    ops = [k for k in scratch_series(found) if k[0] == contract.LUSTRE_CLIENT_OPERATIONS]
    assert len(ops) == MAX_OPERATIONS
    assert ("operation", "open") in next(k for k in ops if ("operation", "open") in k[1])[1]  # real ones kept
    assert errors(found, "series_limit") == 1
