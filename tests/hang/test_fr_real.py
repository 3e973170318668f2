"""The real NVRx fault-injection dumps (tests/fixtures/hang/fr): fleetscope names exactly the
injected ranks, and says more precisely than PyTorch's fr_trace and NVRx (docs/hang.md#comparison)."""

from __future__ import annotations

import re

import pytest

from fleetscope.hang.fr_load import load_dir
from fleetscope.hang.fr_reason import analyze_dumps
from tests.hang.builders import FR

CASES = ("gpu_error_2nd", "lock_gil_1st")


def _injected(case: str) -> set[int]:
    text = (FR / case / "fault_injection.log").read_text()
    return {int(r) for r in re.search(r"Fault ranks: \[([^\]]*)\]", text).group(1).split(",")}  # type: ignore[union-attr]


@pytest.mark.parametrize("case", CASES)
def test_waiting_for_is_exactly_the_injected_ranks(case: str) -> None:
    ds = load_dir(FR / case)
    assert sorted(ds.dumps) == list(range(16)) and not ds.problems
    hangs, _ = analyze_dumps(ds)
    named = {r.rank for h in hangs for r in h.waiting_for}
    assert named == _injected(case) == {9, 14}
    assert all(h.confirmed for h in hangs)


def test_gpu_error_is_launched_but_not_completed_where_the_peers_completed() -> None:
    hangs, _ = analyze_dumps(load_dir(FR / "gpu_error_2nd"))
    (h,) = hangs
    assert (h.group, h.op, h.seq, h.reason, h.confidence) == (
        "72:EXPERT_MODEL_PARALLEL_GROUP", "nccl:all_to_all", 44791, "launched_not_completed", "high"
    )  # fmt: skip
    assert any("#44788" in e and "pending on rank 9" in e and "completed it" in e for e in h.evidence)


def test_lock_gil_is_not_launched_by_ranks_that_dumped_no_entry() -> None:
    ds = load_dir(FR / "lock_gil_1st")
    assert ds.dumps[9].entries == [] and ds.dumps[14].entries == []
    (h,) = analyze_dumps(ds)[0]
    assert (h.group, h.op, h.seq, h.reason) == (
        "72:EXPERT_MODEL_PARALLEL_GROUP",
        "nccl:all_to_all",
        45265,
        "not_launched",
    )
    assert any("nothing pending" in e for e in h.evidence)


#: What each tool names on each fixture (docs/hang.md#comparison). fr_trace: PyTorch 2.13.0's
#: ``python -m torch.distributed.flight_recorder.fr_trace DIR -p _dump_``, run on these files: the
#: union of its "missing ranks" over its "Not all ranks joining collective" reports (how many, in
#: how many groups). NVRx: its reference output, nvrx_reference_output.txt beside the dumps.
COMPARISON = {
    "gpu_error_2nd": {
        "fr_trace": {"ranks": {0, 1, 2, 3, 4, 5, 6, 7, 9, 14}, "reports": 25, "groups": 7},
        "nvrx": {9, 14},
        "fleetscope": {9, 14},
    },
    "lock_gil_1st": {
        "fr_trace": {"ranks": {9, 14}, "reports": 14, "groups": 4},
        "nvrx": {9, 14},
        "fleetscope": {9, 14},
    },
}


@pytest.mark.parametrize("case", CASES)
def test_comparison_with_fr_trace_and_nvrx(case: str) -> None:
    row = COMPARISON[case]
    injected = _injected(case)
    nvrx = (FR / case / "nvrx_reference_output.txt").read_text().splitlines()[-1]
    assert {int(x) for x in nvrx.rsplit("|", 1)[1].split(",")} == row["nvrx"]
    hangs, _ = analyze_dumps(load_dir(FR / case))
    ours = {r.rank for h in hangs for r in h.waiting_for}
    assert ours == row["fleetscope"] == injected
    assert len(hangs) == 1  # one entry, where fr_trace prints one per stuck (group, seq)
    fr_trace = row["fr_trace"]
    assert isinstance(fr_trace, dict)
    # fr_trace names every injected rank, and on gpu_error_2nd eight healthy ones besides
    assert injected <= fr_trace["ranks"]
    assert len(fr_trace["ranks"] - injected) == (8 if case == "gpu_error_2nd" else 0)
