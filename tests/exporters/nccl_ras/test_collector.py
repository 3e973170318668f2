"""The nccl_ras collector against a fake RAS listener on 127.0.0.1 (real TCP, NCCL's protocol)."""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import pytest

from fleetscope import contract as c
from fleetscope.exporters.base import NodeContext
from fleetscope.exporters.nccl_ras import NcclRasCollector, _Last, next_ask
from fleetscope.exporters.ras_series import series_bound
from fleetscope.exporters.registry import NodeCollector
from tests.support.fake_ras import FakeRas
from tests.support.slow_peers import wait_until

TIMEOUT = 1.5


def collector(*addresses: str, training_dir: Path | None = None, **opts: object) -> NcclRasCollector:
    ns = argparse.Namespace(
        nccl_ras_address=list(addresses) or None,
        nccl_ras_timeout=opts.pop("nccl_ras_timeout", TIMEOUT),
        nccl_ras_min_interval=opts.pop("min_interval", 0.001),
        training_directory=str(training_dir) if training_dir else "/nonexistent",
        **opts,
    )
    return NcclRasCollector(NodeContext(node_name="node-a", options=ns))


def samples(col: NcclRasCollector) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in col.collect():
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def test_json_report_names_the_rank_behind():
    with FakeRas.fixture("ray_test_multi_comm_one_mismatched.json") as ras:
        got = samples(collector(f"job-1={ras.address}"))
    assert got[c.NCCL_RAS_UP] == [({"Hostname": "node-a", "job_id": "job-1"}, 1.0)]
    expected = ["CLIENT PROTOCOL 2", f"TIMEOUT {int(TIMEOUT) - 1 or 1}", "SET FORMAT json", "STATUS"]
    assert ras.commands[:4] == expected
    behind = got[c.NCCL_RAS_RANK_BEHIND]
    assert [(lb["comm"], lb["op"], lb["rank"], v) for lb, v in behind] == [
        ("0x4e0104c2022fa2f9", "AllReduce", "1", 7.0)
    ]
    assert behind[0][0]["rank_host"] and behind[0][0]["rank_gpu"] != ""
    by_comm = {lb["comm"]: v for lb, v in got[c.NCCL_RAS_RANKS_BEHIND]}
    assert by_comm == {"0x4e0104c2022fa2f9": 1.0, "0xd0d47b5885b3b54b": 0.0, "0xbeebea5449e0a7e7": 0.0}
    assert got[c.NCCL_RAS_COMMUNICATORS][0][1] == 3.0


def test_nccl_2_28_9_invalid_json_is_repaired_and_names_the_missing_rank():
    with FakeRas.fixture("ray_test_missing_rank_malformed_2.28.9.json") as ras:
        got = samples(collector(f"job-1={ras.address}"))
    assert got[c.NCCL_RAS_UP][0][1] == 1.0
    [(labels, value)] = got[c.NCCL_RAS_RANK_MISSING]
    assert (labels["rank"], labels["rank_host"], labels["rank_gpu"], value) == ("1", "10.0.77.184", "1", 1.0)
    assert got[c.NCCL_RAS_COMM_MISSING_RANKS][0][1] == 1.0


def test_text_report_of_nccl_before_2_28_7():
    """An NCCL without SET FORMAT answers ERROR: the text report is asked for (verbose) and read."""
    with FakeRas.fixture("doc_text_warning_mismatch_opcount.txt", json_format=False) as ras:
        got = samples(collector(f"job-1={ras.address}"))
    assert "VERBOSE STATUS" in ras.commands
    assert got[c.NCCL_RAS_UP][0][1] == 1.0
    assert got[c.NCCL_RAS_RANKS_BEHIND][0][1] == 6.0
    named = got[c.NCCL_RAS_RANK_BEHIND]
    assert 0 < len(named) <= c.NCCL_RAS_MAX_NAMED_RANKS
    assert all(v == 1.0 and lb["rank_host"] == "172.16.64.210" for lb, v in named)


def test_dead_process_in_text_report():
    with FakeRas.fixture("doc_text_dead_process.txt", json_format=False) as ras:
        got = samples(collector(f"job-1={ras.address}"))
    [(labels, value)] = got[c.NCCL_RAS_RANK_MISSING]
    assert (labels["rank"], labels["rank_gpu"], value) == ("21", "5", 2.0)  # 2: considered dead


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("slow", {"timeout"}),
        ("close", {"protocol", "unreachable"}),  # EOF, or a reset if our handshake was unread
        ("endless", {"oversize"}),
        ("trickle", {"timeout"}),
        ("not_ras", {"protocol"}),
    ],
)
def test_bad_ras_never_holds_the_scrape(mode, reason):
    """Slow, closing, endless, trickling or foreign listeners: the scrape ends within the collector's
    budget, nccl_ras_up is 0 and the failure is counted with its reason."""
    ras = FakeRas.fixture("ray_test_healthy.json", mode=mode)
    with ras:
        col = collector(f"job-1={ras.address}", nccl_ras_max_reply_bytes=1 << 20)
        node = NodeCollector([col], timeout=8.0)
        start = time.monotonic()
        fams = list(node.collect())
        took = time.monotonic() - start
    assert took < TIMEOUT + 1.0, f"{mode}: the scrape took {took:.2f}s"
    by = {s.name: s for f in fams for s in f.samples if s.labels.get("collector", "nccl_ras") == "nccl_ras"}
    assert by[c.NCCL_RAS_UP].value == 0.0
    assert by[c.COLLECTOR_SUCCESS].value == 1.0
    errors = col.error_counts()
    assert len(errors) == 1 and set(errors) <= reason and sum(errors.values()) == 1, errors


def test_dead_port_is_unreachable_quickly():
    ras = FakeRas()
    port = ras.port
    ras.sock.close()  # nothing listens there any more
    col = collector(f"job-1=127.0.0.1:{port}")
    start = time.monotonic()
    got = samples(col)
    assert time.monotonic() - start < TIMEOUT
    assert got[c.NCCL_RAS_UP][0][1] == 0.0
    assert col.error_counts() == {"unreachable": 1}


def test_min_interval_serves_the_last_answer():
    with FakeRas.fixture("ray_test_healthy.json") as ras:
        col = collector(f"job-1={ras.address}", min_interval=60.0)
        first, second = samples(col), samples(col)
    assert ras.connections == 1
    assert first == second


def test_the_wait_after_slow_failures_doubles_up_to_a_minute():
    ok = _Last(100.0, None, 0)
    assert next_ask(ok, 10.0) == 110.0  # a failure that cost nothing, or an answer: the minimum
    assert [next_ask(_Last(100.0, None, n), 10.0) - 100.0 for n in range(1, 7)] == [10, 20, 40, 60, 60, 60]
    assert next_ask(_Last(100.0, None, 500), 10.0) == 160.0  # no overflow however long it lasts
    assert next_ask(_Last(100.0, None, 3), 90.0) == 190.0  # never under the minimum interval


def test_a_ras_that_times_out_does_not_hold_every_scrape():
    """A RAS that does not answer in time holds one scrape; the next ones serve nccl_ras_up 0 at
    once, and it is asked again after a wait that doubles with each slow failure in a row; an
    answer ends the back-off."""
    ras = FakeRas.fixture("ray_test_healthy.json", mode="slow")
    with ras:
        col = collector(f"job-1={ras.address}", nccl_ras_timeout=0.5, min_interval=0.4)
        [target] = col.targets()
        start = time.monotonic()
        assert samples(col)[c.NCCL_RAS_UP][0][1] == 0.0
        assert time.monotonic() - start >= 0.5 and ras.connections == 1
        assert samples(col)[c.NCCL_RAS_UP][0][1] == 0.0  # served at once, not asked
        assert ras.connections == 1
        assert col.error_counts() == {"timeout": 1}
        first = col._last[target]
        assert first.slow_failures == 1 and next_ask(first, 0.4) == first.at + 0.4

        assert wait_until(lambda: time.monotonic() > next_ask(col._last[target], 0.4), 5)
        samples(col)  # asked again: the second timeout in a row
        assert ras.connections == 2 and col._last[target].slow_failures == 2
        assert next_ask(col._last[target], 0.4) == col._last[target].at + 0.8

        ras.mode = "ok"  # it answers again
        assert wait_until(lambda: time.monotonic() > next_ask(col._last[target], 0.4), 5)
        assert samples(col)[c.NCCL_RAS_UP][0][1] == 1.0
        assert ras.connections == 3 and col._last[target].slow_failures == 0


def test_a_failure_that_cost_nothing_is_asked_again_after_the_minimum_interval():
    ras = FakeRas()
    port = ras.port
    ras.sock.close()
    col = collector(f"job-1=127.0.0.1:{port}", min_interval=0.2)
    [target] = col.targets()
    samples(col)
    samples(col)  # within the minimum interval: not asked
    assert col.error_counts() == {"unreachable": 1} and col._last[target].slow_failures == 0
    assert wait_until(lambda: time.monotonic() > col._last[target].at + 0.2, 5)
    samples(col)
    assert col.error_counts() == {"unreachable": 2}


def big_report(world: int, tp: int, behind: list[int], missing: list[int]) -> str:
    """An NCCL-shaped JSON report of a ``world``-rank job: the world communicator, one per
    tensor-parallel group and one per data-parallel group; ``behind`` ranks launched one fewer
    AllReduce, ``missing`` ranks did not answer."""

    def rank(r: int, count: int) -> dict:
        return {
            "rank": r, "host": f"10.0.{r // 8 // 256}.{r // 8 % 256}", "pid": 1000 + r, "cuda_dev": r % 8,
            "nvml_dev": r % 8, "status": {"init_state": 0, "async_error": 0, "finalize_called": False,
            "destroy_flag": False, "abort_flag": False},
            "collective_counts": {"AllReduce": count, "AllGather": 50},
        }  # fmt: skip

    def comm(i: int, members: list[int]) -> dict:
        present = [m for m in members if m not in missing]
        return {
            "hash": f"0x{i:016x}", "secondary_hash": "0x1:0x2", "size": len(members),
            "ranks_count": len(present), "missing_ranks_count": len(members) - len(present),
            "ranks": [rank(j, 999 if m in behind else 1000) for j, m in enumerate(members) if m in present],
            "missing_ranks": [
                {"rank": j, "host": "10.9.9.9", "pid": 7, "cuda_dev": 0, "nvml_dev": 0,
                 "status": {"unresponsive": True, "considered_dead": True}}
                for j, m in enumerate(members) if m in missing
            ],
        }  # fmt: skip

    comms = [comm(0, list(range(world)))]
    comms += [comm(1 + g, list(range(g * tp, (g + 1) * tp))) for g in range(world // tp)]
    comms += [comm(10_000 + k, list(range(k, world, tp))) for k in range(tp)]
    return json.dumps({"nccl_version": "2.28.9", "timestamp": "2026-12-06 05:00:00",
                       "communicators_count": len(comms), "communicators": comms})  # fmt: skip


def test_cardinality_is_bounded_at_4096_ranks():
    """A 4,096-rank job (529 communicators) with 300 ranks behind and 20 missing: the series stay
    within the bound that does not depend on the job's size, and the world communicator (the one
    with trouble) is among them with its furthest-behind ranks named."""
    behind = list(range(0, 3000, 10))
    report = big_report(4096, 8, behind, missing=list(range(4000, 4020)))
    # Its speed is measured in benchmarks/bench_hang.py (docs/benchmarks.md), not asserted here.
    with FakeRas(report) as ras:
        got = samples(collector(f"job-big={ras.address}", nccl_ras_timeout=10.0))
    total = sum(len(v) for v in got.values())
    assert total <= series_bound() + 1
    assert total < 600
    world_comm = f"0x{0:016x}"
    world = [
        v for lb, v in got[c.NCCL_RAS_RANKS_BEHIND] if lb["comm"] == world_comm and lb["op"] == "AllReduce"
    ]
    assert world == [float(len(behind))]
    named = [lb for lb, _ in got[c.NCCL_RAS_RANK_BEHIND] if lb["comm"] == f"0x{0:016x}"]
    assert len(named) == c.NCCL_RAS_MAX_NAMED_RANKS
    per_comm: dict[str, int] = {}
    for lb, _ in got[c.NCCL_RAS_RANK_MISSING]:
        per_comm[lb["comm"]] = per_comm.get(lb["comm"], 0) + 1
    assert per_comm and max(per_comm.values()) <= c.NCCL_RAS_MAX_NAMED_RANKS
    assert got[c.NCCL_RAS_COMMUNICATORS][0][1] == 1 + 512 + 8


def write_rank0(directory: Path, job: str, addr: str) -> Path:
    path = directory / f"{job}-rank0.prom"
    path.write_text(
        f"# fleetscope-training v1 pid={os.getpid()} nccl_ras_addr={addr}\n"
        f'training_info{{job_id="{job}",rank="0",local_rank="0",gpu="0",flops_convention="palm"}} 1\n'
    )
    return path


def test_discovery_from_rank0_files(tmp_path):
    """Without addresses, the node that holds a job's rank-0 file asks that job's RAS; a file
    pointing elsewhere than loopback is refused (a job must not aim the exporter at other hosts)."""
    with FakeRas.fixture("ray_test_healthy.json") as ras:
        write_rank0(tmp_path, "job-7", ras.address)
        write_rank0(tmp_path, "job-evil", "203.0.113.5:28028")
        (tmp_path / "job-7-rank1.prom").write_text("# fleetscope-training v1 nccl_ras_addr=127.0.0.1:1\n")
        col = collector(training_dir=tmp_path)
        got = samples(col)
    assert [lb["job_id"] for lb, _ in got[c.NCCL_RAS_UP]] == ["job-7"]
    assert got[c.NCCL_RAS_UP][0][1] == 1.0
    assert col.error_counts() == {"discovery": 1}


def test_no_rank0_here_no_query(tmp_path):
    col = collector(training_dir=tmp_path)
    assert samples(col) == {}
