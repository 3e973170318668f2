"""Dumps are pickles from other machines: a hostile, huge, truncated, empty or wrong file is one
line naming it, nothing of it runs, and the other ranks are still used."""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path

import pytest

from fleetscope.hang.fr_load import load_dir
from fleetscope.hang.fr_reason import analyze_dumps
from fleetscope.hang.safe_pickle import MAX_PICKLE_BYTES, UnsafePickle, loads_plain
from tests.hang.builders import FR


class _Boom:
    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, ("touch /tmp/fleetscope-hang-pwned",))


class _State:
    def __init__(self) -> None:
        self.x = 1


def _real_dump() -> bytes:
    return (FR / "lock_gil_1st" / "_dump_3").read_bytes()


HOSTILE: dict[str, bytes | None] = {
    "os_system_reduce": pickle.dumps(_Boom(), protocol=2),
    "a_class_global": pickle.dumps(_State(), protocol=4),
    "builtins_eval": b"cbuiltins\neval\n(S'1+1'\ntR.",
    "truncated": _real_dump()[: len(_real_dump()) // 2],
    "empty": b"",
    "a_list_not_a_dict": pickle.dumps([1, 2, 3]),
    "a_dict_without_entries": pickle.dumps({"hello": 1}),
    "garbage": b"\x00\xffnot a pickle at all",
    "bad_json": b'{"version": "2.9", "entries": [',
    "huge": None,  # a sparse file past the size limit
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_a_hostile_dump_is_one_line_and_the_other_ranks_are_used(tmp_path: Path, kind: str) -> None:
    d = tmp_path / "dumps"
    shutil.copytree(FR / "lock_gil_1st", d)
    target = d / "_dump_3"
    target.chmod(0o644)
    data = HOSTILE[kind]
    if data is None:
        with open(target, "wb") as fh:
            fh.truncate(MAX_PICKLE_BYTES + 1)
    else:
        target.write_bytes(data)
    marker = Path("/tmp/fleetscope-hang-pwned")
    marker.unlink(missing_ok=True)
    ds = load_dir(d)
    assert not marker.exists()  # nothing in the file ran
    lines = [p for p in ds.problems if "_dump_3" in p]
    assert len(lines) == 1 and "\n" not in lines[0] and str(target) in lines[0], ds.problems
    assert ds.unreadable == {3} and len(ds.dumps) == 15
    hangs, _ = analyze_dumps(ds)
    by_rank = {r.rank: h for h in hangs for r in h.waiting_for}
    assert {9, 14} <= set(by_rank) and by_rank[9].reason == "not_launched"
    assert set(by_rank) - {9, 14} <= {3} and (3 not in by_rank or by_rank[3].reason == "unknown")


def test_the_unpickler_refuses_every_global_and_persistent_id() -> None:
    for data in (HOSTILE["os_system_reduce"], HOSTILE["a_class_global"], HOSTILE["builtins_eval"]):
        with pytest.raises(UnsafePickle, match="refuses the global"):
            loads_plain(data)  # type: ignore[arg-type]
    with pytest.raises(UnsafePickle, match="persistent id"):
        loads_plain(b"\x80\x02P0\n.")
    assert loads_plain(pickle.dumps({"a": [1, 2.5, None, True, ("x", b"y")]})) == {
        "a": [1, 2.5, None, True, ("x", b"y")]
    }


def test_a_fifo_and_other_prefixes_are_not_read(tmp_path: Path) -> None:
    d = tmp_path / "dumps"
    shutil.copytree(FR / "gpu_error_2nd", d)
    os.mkfifo(d / "_dump_99")  # opening it would block: it is skipped, not read
    (d / "other_7").write_bytes(b"x")
    ds = load_dir(d)
    assert sorted(ds.dumps) == list(range(16))
    assert any("other_" in p for p in ds.problems)


def _dag_bomb() -> bytes:
    """30 levels of a list holding the next one twice: a few hundred bytes, 2**30 leaves if printed."""
    inner: list = [1]
    for _ in range(30):
        inner = [inner, inner]
    entry = {"record_id": 1, "process_group": ("0", inner), "collective_seq_id": 1, "profiling_name": inner,
             "input_sizes": inner, "input_dtypes": inner, "state": "scheduled"}  # fmt: skip
    return pickle.dumps({"version": "2.9", "pg_config": {"0": {"name": "0", "desc": inner, "ranks": inner}},
                         "entries": [entry]}, protocol=2)  # fmt: skip


def test_a_shared_reference_bomb_loads_in_bounded_time(tmp_path: Path) -> None:
    from fleetscope.hang.fr_load import load_file

    p = tmp_path / "_dump_0"
    p.write_bytes(_dag_bomb())
    assert p.stat().st_size < 2000
    d = load_file(p, 0)
    (e,) = d.entries
    assert e.input_sizes == "?" and e.dtypes == "?" and e.op == "" and d.descs["0"] == ""
