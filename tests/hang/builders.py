"""Build Flight Recorder dumps and NCCL RAS reports in the shapes the real ones have
(tests/fixtures/hang/README.md), for generated cases of each reason class."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hang"
FR = FIXTURES / "fr"
RAS = FIXTURES / "ras"

Groups = dict[str, tuple[str, list[int]]]


def dump(
    rank: int,
    groups: Groups,
    progress: dict[str, tuple[int, int]],
    *,
    version: str = "2.9",
    ops: dict[tuple[str, int], dict[str, Any]] | None = None,
    full: bool = False,
    first_record: int = 1000,
    status: bool = True,
    p2p: dict[str, int] | None = None,
    t0_ns: int = 1_758_580_000_000_000_000,
) -> dict[str, Any]:
    """One rank's dump. ``progress[group] = (last enqueued, last completed)``; entries are the
    pending ops (``full``: also the last 5 completed ones, as a dump without onlyActive has).
    ``p2p[group] = peer group-rank``: the group's ops are send/recv with that peer."""
    mine = {g: v for g, v in groups.items() if rank in v[1]}
    entries = []
    rid = first_record
    for g in list(mine):
        desc, members = mine[g]
        enq, comp = progress.get(g, (0, 0))
        lo = max(1, comp - 4) if full else comp + 1
        for seq in range(lo, enq + 1):
            spec = {"op": "nccl:all_reduce", "dtype": "Float", "sizes": [[1024]]}
            spec.update((ops or {}).get((g, seq), {}))
            is_p2p = p2p is not None and g in p2p
            me = members.index(rank)
            name = spec["op"]
            if is_p2p:
                assert p2p is not None
                peer = p2p[g]
                name = f"nccl:send {me}->{peer}" if me < peer else f"nccl:recv {me}<-{peer}"
            entries.append(
                {
                    "record_id": rid,
                    "pg_id": list(mine).index(g),
                    "process_group": (g, desc),
                    "thread_name": "python3",
                    "thread_id": "1",
                    "collective_seq_id": 0 if is_p2p else seq,
                    "p2p_seq_id": seq if is_p2p else 0,
                    "op_id": seq,
                    "profiling_name": name,
                    "time_created_ns": t0_ns + rid * 1000,
                    "input_sizes": spec["sizes"],
                    "input_dtypes": [spec["dtype"]],
                    "output_sizes": spec["sizes"],
                    "output_dtypes": [spec["dtype"]],
                    "state": "completed" if seq <= comp else "scheduled",
                    "time_discovered_started_ns": None,
                    "time_discovered_completed_ns": None,
                    "retired": seq <= comp,
                    "timeout_ms": 600000,
                    "is_p2p": is_p2p,
                }
            )
            rid += 1
    out: dict[str, Any] = {
        "version": version,
        "pg_config": {g: {"name": g, "desc": d, "ranks": str(m)} for g, (d, m) in mine.items()},
        "entries": entries,
    }
    if status:
        out["pg_status"] = {
            str(list(mine).index(g)): {
                "last_enqueued_collective": progress.get(g, (0, 0))[0],
                "last_started_collective": -1,
                "last_completed_collective": progress.get(g, (0, 0))[1],
            }
            for g in mine
        }
    return out


def write(
    directory: Path, dumps: dict[int, dict[str, Any]], prefix: str = "_dump_", fmt: str = "pickle"
) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for rank, d in dumps.items():
        p = directory / f"{prefix}{rank}{'.json' if fmt == 'json' else ''}"
        if fmt == "json":
            p.write_text(json.dumps(d))
        else:
            p.write_bytes(pickle.dumps(d, protocol=2))
    return directory


def world(n: int) -> Groups:
    return {"0": ("default_pg", list(range(n)))}


def ras_report(
    counts: dict[int, int],
    *,
    missing: dict[int, bool] | None = None,
    ts: str = "2026-06-19 06:51:56",
    flags: dict[int, dict[str, Any]] | None = None,
    comm: str = "0x1111",
    op: str = "AllReduce",
    version: str = "2.29.1",
) -> dict[str, Any]:
    """One ``ncclras -f json`` report of one communicator: ``counts[rank]`` collectives launched;
    ``missing[rank] = considered_dead``."""
    size = len(counts) + len(missing or {})
    ranks = []
    for r, n in sorted(counts.items()):
        status = {"init_state": 0, "async_error": 0, "finalize_called": False, "destroy_flag": False,
                  "abort_flag": False}  # fmt: skip
        status.update((flags or {}).get(r, {}))
        cc = dict.fromkeys(("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce"), 0)
        cc[op] = n
        where = {"host": f"10.0.0.{r // 8}", "pid": 1000 + r, "cuda_dev": r % 8, "nvml_dev": r % 8}
        ranks.append({"rank": r, **where, "status": status, "collective_counts": cc})
    miss = [
        {"rank": r, "host": f"10.0.0.{r // 8}", "pid": 1000 + r, "cuda_dev": r % 8, "nvml_dev": r % 8,
         "status": {"unresponsive": True, "considered_dead": dead}}
        for r, dead in sorted((missing or {}).items())
    ]  # fmt: skip
    return {
        "nccl_version": version,
        "cuda_runtime_version": 12090,
        "cuda_driver_version": 13000,
        "timestamp": ts,
        "communicators_count": 1,
        "communicators": [
            {"hash": comm, "secondary_hash": "0xa:0xb", "size": size, "ranks_count": len(ranks),
             "missing_ranks_count": len(miss), "ranks": ranks, "missing_ranks": miss}
        ],
        "ras": {"collection_time_sec": 0.0, "timeouts_count": 0},
    }  # fmt: skip
