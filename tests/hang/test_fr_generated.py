"""Generated dump sets, one per reason class and per real-world wrinkle (tests/hang/builders.py)."""

from __future__ import annotations

from pathlib import Path

from fleetscope.hang.fr_load import load_dir
from fleetscope.hang.fr_reason import analyze_dumps
from tests.hang.builders import dump, world, write

N = 8


def _run(tmp: Path, dumps: dict, **kw):
    ds = load_dir(write(tmp / "d", dumps, **kw))
    return analyze_dumps(ds)


def _named(hangs) -> set[int]:
    return {r.rank for h in hangs for r in h.waiting_for}


def test_a_rank_that_never_launched_the_collective(tmp_path: Path) -> None:
    g = world(N) | {"1": ("TP", [0, 1, 2, 3]), "2": ("TP", [4, 5, 6, 7])}
    dumps = {}
    for r in range(N):
        prog = {"0": (10, 9) if r != 5 else (9, 9), "1": (20, 20), "2": (21, 20) if r != 5 else (20, 20)}
        dumps[r] = dump(r, g, prog)
    (h,) = _run(tmp_path, dumps)[0]
    assert _named([h]) == {5} and h.reason == "not_launched" and (h.group, h.seq) == ("0:default_pg", 10)


def test_a_rank_whose_peers_completed_what_it_did_not(tmp_path: Path) -> None:
    dumps = {r: dump(r, world(N), {"0": (11, 10) if r != 3 else (10, 9)}) for r in range(N)}
    (h,) = _run(tmp_path, dumps)[0]
    assert _named([h]) == {3} and h.reason == "launched_not_completed" and h.confidence == "high"


def test_a_dtype_mismatch_names_the_odd_rank_and_what_differs(tmp_path: Path) -> None:
    dumps = {
        r: dump(r, world(N), {"0": (10, 9)}, ops={("0", 10): {"dtype": "Half"}} if r == 6 else None)
        for r in range(N)
    }
    (h,) = _run(tmp_path, dumps)[0]
    assert _named([h]) == {6} and h.reason == "mismatch"
    assert any("dtype" in e and "Half" in e for e in h.evidence)


def test_a_size_mismatch_says_sizes(tmp_path: Path) -> None:
    dumps = {
        r: dump(r, world(N), {"0": (10, 9)}, ops={("0", 10): {"sizes": [[7]]}} if r == 2 else None)
        for r in range(N)
    }
    (h,) = _run(tmp_path, dumps)[0]
    assert _named([h]) == {2} and h.reason == "mismatch" and any("sizes" in e for e in h.evidence)


def test_a_rank_without_a_dump_is_named_unknown(tmp_path: Path) -> None:
    dumps = {r: dump(r, world(N), {"0": (10, 9)}) for r in range(N) if r != 4}
    (h,) = _run(tmp_path, dumps)[0]
    assert _named([h]) == {4} and h.reason == "unknown" and any("left no dump" in e for e in h.evidence)


def test_launched_everywhere_completed_nowhere_names_no_rank(tmp_path: Path) -> None:
    dumps = {r: dump(r, world(N), {"0": (10, 9)}) for r in range(N)}
    (h,) = _run(tmp_path, dumps)[0]
    assert h.waiting_for == [] and h.reason == "launched_not_completed" and h.confidence == "low"


def test_a_healthy_set_gives_no_hang(tmp_path: Path) -> None:
    dumps = {r: dump(r, world(N), {"0": (10, 10)}, full=True) for r in range(N)}
    hangs, notes = _run(tmp_path, dumps)
    assert hangs == [] and any("no rank waits" in n for n in notes)


def _chain() -> dict[int, dict]:
    """Rank 6 stops; rank 2 (its data-parallel peer) waits for it and so never reaches its own
    tensor-parallel collective, where ranks 0, 1, 3 wait for rank 2: a consequence, not a cause."""
    g = world(N) | {"1": ("TP", [0, 1, 2, 3]), "2": ("TP", [4, 5, 6, 7])}
    g |= {str(10 + i): ("DP", [i, i + 4]) for i in range(4)}
    dumps = {}
    for r in range(N):
        prog = {"0": (5, 5), "1": (50, 49), "2": (50, 49)}
        prog |= {str(10 + i): (30, 30) for i in range(4)}
        if r == 6:
            prog["2"] = (49, 49)
            prog["12"] = (29, 29)
        if r == 2:
            prog["1"] = (49, 49)
            prog["12"] = (30, 29)
        dumps[r] = dump(r, g, prog)
    return dumps


def test_only_the_origin_is_reported_not_the_ranks_blocked_behind_it(tmp_path: Path) -> None:
    hangs, _ = _run(tmp_path, _chain())
    assert _named(hangs) == {6}
    (h,) = hangs
    assert h.reason == "not_launched" and any("blocks 2 groups" in e for e in h.evidence)


def test_ring_buffers_starting_at_different_records_and_mixed_versions(tmp_path: Path) -> None:
    g = world(N) | {"1": ("TP", [0, 1, 2, 3])}
    dumps = {}
    for r in range(N):
        prog = {"0": (100, 99) if r != 1 else (99, 99), "1": (40, 40)}
        old = r % 2 == 0
        dumps[r] = dump(
            r, g, prog, full=True, first_record=5000 + 37 * r, version="2.4" if old else "2.9", status=not old
        )
    (h,) = _run(tmp_path, dumps)[0]
    assert _named([h]) == {1} and h.reason == "not_launched" and h.seq == 100


def test_json_dumps_with_another_prefix(tmp_path: Path) -> None:
    dumps = {r: dump(r, world(4), {"0": (10, 9) if r != 0 else (9, 9)}) for r in range(4)}
    ds = load_dir(write(tmp_path / "j", dumps, prefix="nccl_trace_rank_", fmt="json"))
    assert sorted(ds.dumps) == [0, 1, 2, 3]
    (h,) = analyze_dumps(ds)[0]
    assert _named([h]) == {0}


def test_point_to_point_waits_for_the_peer(tmp_path: Path) -> None:
    g = {"0": ("default_pg", [0, 1, 2, 3]), "5": ("PIPELINE", [2, 3])}
    dumps = {}
    for r in range(4):
        prog = {"0": (8, 8), "5": (5, 4) if r == 2 else (4, 4)}
        dumps[r] = dump(r, g, prog, p2p={"5": 1 if r == 2 else 0})
    (h,) = _run(tmp_path, dumps)[0]
    assert _named([h]) == {3} and h.reason == "not_launched" and h.op.startswith("nccl:send")


def test_a_rank_stuck_with_its_whole_group_while_the_world_waits_for_it(tmp_path: Path) -> None:
    """Rank 5 launched its tensor-parallel op (which no member completed) and never the world's
    next collective: the world waits for rank 5, not for the group it shares with 4, 6, 7."""
    g = world(N) | {"1": ("TP", [0, 1, 2, 3]), "2": ("TP", [4, 5, 6, 7])}
    dumps = {r: dump(r, g, {"0": (10, 9) if r != 5 else (9, 9), "1": (3, 3), "2": (4, 3)}) for r in range(N)}
    (h,) = _run(tmp_path, dumps)[0]
    assert _named([h]) == {5} and h.reason == "not_launched" and h.group == "0:default_pg"


def test_ranks_waiting_for_each_other_in_different_groups_are_an_order_mismatch(tmp_path: Path) -> None:
    g = {"0": ("default_pg", [0, 1]), "1": ("A", [0, 1]), "2": ("B", [0, 1])}
    dumps = {
        0: dump(0, g, {"0": (1, 1), "1": (5, 4), "2": (4, 4)}),
        1: dump(1, g, {"0": (1, 1), "1": (4, 4), "2": (5, 4)}),
    }
    (h,) = _run(tmp_path, dumps)[0]
    assert _named([h]) == {0, 1} and h.reason == "mismatch" and "order mismatch" in h.evidence[0]


def test_hashed_group_names_pair_status_only_through_entries(tmp_path: Path) -> None:
    """With non-numeric group names, a rank with no entry in a group has no status there: the
    others wait for it as unknown, never for a mis-paired number."""
    g = {"0": ("default_pg", list(range(4))), "ab12": ("TP", [0, 1, 2, 3])}
    dumps = {r: dump(r, g, {"0": (3, 3), "ab12": (9, 8) if r != 2 else (8, 8)}) for r in range(4)}
    ds = load_dir(write(tmp_path / "h", dumps))
    assert "ab12" not in ds.dumps[2].status and ds.dumps[0].status["ab12"].enqueued == 9
    (h,) = analyze_dumps(ds)[0]
    assert _named([h]) == {2} and h.reason == "unknown"
