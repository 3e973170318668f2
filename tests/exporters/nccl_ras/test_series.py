"""One RAS report as series: which communicators, which ranks, which labels (ras_series)."""

from __future__ import annotations

from fleetscope import contract as c
from fleetscope.exporters.ras_series import ANY_OP, report_series, series_bound
from fleetscope.hang.ras_parse import RasComm, RasMissing, RasRank, RasReport, parse_text


def comm(h: str, counts: list[int], missing: tuple[int, ...] = ()) -> RasComm:
    ranks = [
        RasRank(r, f"10.0.0.{r}", 100 + r, 0, r % 8, counts={"AllReduce": n}) for r, n in enumerate(counts)
    ]
    return RasComm(h, size=len(counts) + len(missing), ranks=ranks, missing=[RasMissing(r) for r in missing])


def test_troubled_communicators_first_then_the_largest_stable():
    healthy = [comm(f"0x{i:04x}", [5] * (2 + i)) for i in range(30)]
    skewed = comm("0xskew", [5, 5, 4])
    gone = comm("0xgone", [5, 5], missing=(2,))
    rep = RasReport("t", "json", comms=[*healthy, skewed, gone])
    series = report_series(rep, max_communicators=4)
    served = [labels[0] for labels, _ in series.rows[c.NCCL_RAS_COMM_RANKS]]
    assert served == ["0xgone", "0xskew", "0x001d", "0x001c"]  # trouble, skew, then by size
    assert series.rows[c.NCCL_RAS_COMMUNICATORS] == [((), 32.0)]
    assert sum(len(v) for v in series.rows.values()) <= series_bound(4)


def test_a_hostile_report_cannot_invent_ops_or_repeat_series():
    ranks = [
        RasRank(0, "h", counts={"AllReduce": 9, "Evil" * 100: 1}),
        RasRank(0, "h", counts={"AllReduce": 3}),
    ]
    ranks += [RasRank(1, "x" * 10_000, counts={"AllReduce": 3})]
    series = report_series(RasReport("t", "json", comms=[RasComm("0xa", ranks=ranks)]))
    assert {labels[1] for labels, _ in series.rows[c.NCCL_RAS_COLLECTIVES_MAX]} == {"AllReduce"}
    behind = series.rows[c.NCCL_RAS_RANK_BEHIND]
    assert len({labels for labels, _ in behind}) == len(behind)
    assert series.cut >= 1 and max(len(v) for labels, _ in behind for v in labels) == 256


def test_old_text_report_counts_are_op_any():
    """NCCL < 2.26 prints one count for all collectives: the op label says so (``any``)."""
    text = (
        "Errors\n======\n\n#0-0 (27a079b828ff1a75) MISMATCH\n"
        "  Communicator ranks have different collective operation counts\n"
        "  26 ranks have launched up to operation 6650\n"
        "  6 ranks have launched up to operation 6649\n"
        "  Rank 0 -- GPU 0 managed by process 483072 on node 172.16.64.210\n"
    )
    series = report_series(parse_text(text, "t"))
    [(labels, value)] = series.rows[c.NCCL_RAS_RANKS_BEHIND]
    assert labels == ("27a079b828ff1a75", ANY_OP) and value == 6.0
    [(labels, value)] = series.rows[c.NCCL_RAS_RANK_BEHIND]
    assert labels[2:] == ("0", "172.16.64.210", "0") and value == 1.0
