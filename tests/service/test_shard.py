"""One replica's share of the fleet (fleetscope/service/shard.py): parsing ``--shard``, the stable
partition of jobs, models and nodes, and the label matcher its queries carry."""

from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path

import pytest

from fleetscope import contract as c
from fleetscope.analyzers.findings import Finding
from fleetscope.analyzers.report import JobSummary, NodeVerdict, Report
from fleetscope.errors import FleetscopeError
from fleetscope.service.placement import owner, place
from fleetscope.service.shard import IDENTITY_METRICS, Shard, discovery_query, parse_shard, share_of
from fleetscope.service.views import shard_status

H = "Hostname"
FIXTURES = Path(__file__).parents[1] / "fixtures" / "scenarios"


def test_parse_k_of_n_and_auto_from_the_pod_ordinal() -> None:
    assert parse_shard("1/3") == Shard(1, 3)
    assert parse_shard("auto", "4", hostname="fleetscope-service-3") == Shard(3, 4)
    assert str(Shard(2, 5)) == "2/5"


@pytest.mark.parametrize(
    ("text", "shards", "host", "message"),
    [
        ("3/2", None, None, "K must be below N"),
        ("2/2", None, None, "K must be below N"),
        ("1/0", None, None, "shard count"),
        ("one/two", None, None, "expected K/N"),
        ("auto", "3", "fleetscope", "does not end in -<ordinal>"),
        ("auto", "x", "fleetscope-0", "shard count"),
        ("auto", "2", "fleetscope-2", "K must be below N"),
        # issue 36, item 8: a count no deployment has was accepted
        ("0/99999999999999999999", None, None, "from 1 to 4096"),
        ("0/4097", None, None, "from 1 to 4096"),
        ("0/" + "9" * 5000, None, None, "from 1 to 4096"),  # past int()'s 4,300 digits: no ValueError
        ("9" * 5000 + "/2", None, None, "K must be below N"),
        ("auto", "99999999999999999999", "fleetscope-0", "from 1 to 4096"),
    ],
)
def test_bad_shards_are_usage_errors(text: str, shards: str | None, host: str | None, message: str) -> None:
    with pytest.raises(FleetscopeError, match=re.escape(message)) as err:
        parse_shard(text, shards, hostname=host)
    assert err.value.exit_code == 2 and len(str(err.value)) < 200


def test_serve_refuses_a_huge_shard_count_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from fleetscope.cli import main

    assert main(["serve", "--prometheus", "http://127.0.0.1:1", "--shard", "0/99999999999999999999"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "from 1 to 4096" in err and "Traceback" not in err


def test_auto_reads_the_shard_count_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETSCOPE_SHARDS", "5")
    assert parse_shard("auto", hostname="fs-4") == Shard(4, 5)
    monkeypatch.delenv("FLEETSCOPE_SHARDS")
    with pytest.raises(FleetscopeError, match="needs --shards"):
        parse_shard("auto", hostname="fs-4")


def test_the_hash_is_sha256_not_pythons_salted_hash() -> None:
    # Fixed values: the same in every process, on every machine, in every release.
    assert owner("job:4711", 1_000_003) == 920_799
    assert owner("node:gpu-node-0001", 7) == 1


def _fleet() -> list[dict[str, str]]:
    rows = []
    for j in range(40):  # 40 jobs on 3 nodes each
        for n in range(3):
            rows.append({H: f"n{3 * j + n:03d}", "job_id": f"job-{j}"})
    rows += [{H: f"idle{i}"} for i in range(30)]  # job-less nodes (their GPU series)
    rows += [{H: f"n{k:03d}"} for k in range(120)]  # the jobs' nodes' GPU series
    rows += [{H: "srv1", "model_name": "llama"}, {H: "srv2", "model_name": "llama"}]
    rows += [{H: "n000", "job_id": "job-late"}]  # a second job on job-0's first node
    return rows


def test_every_unit_is_owned_by_exactly_one_shard_and_jobs_keep_their_nodes() -> None:
    rows = _fleet()
    shares = [share_of(rows, Shard(k, 4)) for k in range(4)]
    nodes = [n for s in shares for n in s.nodes]
    jobs = [j for s in shares for j in s.jobs]
    assert len(nodes) == len(set(nodes)) == 120 + 30 + 2
    assert sorted(jobs) == sorted({r["job_id"] for r in rows if "job_id" in r})
    assert [m for s in shares for m in s.models] == ["llama"]
    assert all(s.fleet_nodes == 152 and s.fleet_jobs == 41 for s in shares)
    # A job's nodes are on its shard; jobs sharing a node are one unit.
    for s in shares:
        for j in range(40):
            if f"job-{j}" in s.jobs:
                assert {f"n{3 * j + n:03d}" for n in range(3)} <= set(s.nodes)
    (late,) = [s for s in shares if "job-late" in s.jobs]
    assert "job-0" in late.jobs
    # Roughly even: no shard holds more than twice its fair part of 152 nodes.
    assert max(len(s.nodes) for s in shares) < 2 * 152 / 4
    # A single job that fits its shard: its owner is the hash of its id.
    idle = [{H: f"idle{i}"} for i in range(4)]
    alone = share_of(
        [{H: "x1", "job_id": "solo"}, {H: "x2", "job_id": "solo"}, *idle], Shard(owner("job:solo", 3), 3)
    )
    assert alone.jobs == ("solo",) and {"x1", "x2"} <= set(alone.nodes)


def test_the_matcher_selects_exactly_the_shares_nodes() -> None:
    rows = [{H: "a.b-1"}, {H: "c(2)"}, {H: 'q"x'}, {H: "d\\e"}]
    for k in range(3):
        share = share_of(rows, Shard(k, 3))
        if share.matcher() is None:
            assert k != 0 and not share.nodes  # nothing to ask for
            continue
        m = re.fullmatch(r'Hostname=~"(.*)"', share.matcher() or "")
        assert m is not None
        regex = m.group(1).replace('\\"', '"').replace("\\\\", "\\")
        picked = {n[H] for n in rows if re.fullmatch(regex, n[H])}
        assert picked == set(share.nodes)
        assert (re.fullmatch(regex, "") is not None) == (k == 0)  # series without a node: shard 0
        assert re.fullmatch(regex, "aXb-1") is None
    assert {n for k in range(3) for n in share_of(rows, Shard(k, 3)).nodes} == {r[H] for r in rows}


def test_discovery_is_one_group_by_over_the_window() -> None:
    q = discovery_query(["b_metric", "a_metric", "b_metric"])
    assert (
        q == 'group by (Hostname, job_id, model_name) (last_over_time({__name__=~"a_metric|b_metric"}[60s]))'
    )
    # By default it reads the identity series only, not every metric the analyzers load.
    names = re.search(r'__name__=~"([^"]*)"', discovery_query()).group(1).split("|")  # type: ignore[union-attr]
    assert sorted(names) == sorted(IDENTITY_METRICS) and len(names) == 7


def test_status_says_which_share_this_replica_owns() -> None:
    assert shard_status(None, None) is None
    assert shard_status((1, 3), None)["text"] == "shard 1 of 3"
    share = share_of(_fleet(), Shard(1, 3)).summary()
    st = shard_status((1, 3), share)
    assert st["text"] == f"shard 1 of 3, owning {share['jobs']} of 41 jobs / {share['nodes']} of 152 nodes"
    assert st["nodes"] == share["nodes"] and st["fleet_nodes"] == 152


def test_every_range_query_carries_the_shards_matcher() -> None:
    from fleetscope import contract as c
    from fleetscope.window.prometheus import metric_query

    q = metric_query(c.GPU_PEAK_FLOPS, 30.0, matcher='Hostname=~"a|b"')
    assert f'{{__name__="{c.GPU_PEAK_FLOPS}",dtype="bf16",Hostname=~"a|b"}}' in q
    assert metric_query("x", 30.0) == 'last_over_time({__name__="x"}[30000ms])'


# ---------------------------------------------------------------- issue 35: no share is unbounded


def _jobs_fleet(nodes: int, job_nodes: int = 4, chain: bool = False, fleet_wide: bool = True) -> list[dict]:
    """``nodes`` nodes (their GPU series), jobs of ``job_nodes`` side by side (``chain``: each
    sharing its first node with the one before, as on a node that ran two jobs one after the other),
    and a fleet-wide job with one rank on every node (an NCCL test, a health check)."""
    rows: list[dict] = [{H: f"node-{i:05d}"} for i in range(nodes)]
    stride = job_nodes - 1 if chain else job_nodes
    for j, first in enumerate(range(0, nodes - job_nodes + 1, stride)):
        rows += [{H: f"node-{first + k:05d}", "job_id": f"job-{j}"} for k in range(job_nodes)]
    if fleet_wide:
        rows += [{H: f"node-{i:05d}", "job_id": "nccl-test"} for i in range(nodes)]
    rows += [{H: f"node-{i:05d}", "model_name": "llama"} for i in range(0, nodes, 97)]
    return rows


def _check_partition(rows: list[dict], count: int) -> list:
    placement = place(rows, count)
    shares = [share_of(rows, Shard(k, count)) for k in range(min(count, 3))]  # share_of == place, seen from k
    for k, s in enumerate(shares):
        assert s.nodes == tuple(sorted(n for n, o in placement.nodes.items() if o == k))
        assert s.summary()["bound"] == placement.bound and s.summary()["fetch_nodes"] == len(s.nodes)
    fleet = {r[H] for r in rows}
    jobs = {r["job_id"] for r in rows if "job_id" in r}
    # Every node, job and model exactly one owner; every shard within its bound, and the bound is
    # ceil(fleet / N * 1.25).
    assert (
        set(placement.nodes) == fleet and set(placement.jobs) == jobs and set(placement.models) == {"llama"}
    )
    assert all(0 <= o < count for o in (*placement.nodes.values(), *placement.jobs.values()))
    assert placement.bound == -(-len(fleet) * 5 // (4 * count))
    loads = [placement.load(k) for k in range(count)]
    assert sum(loads) == len(fleet) and max(loads) <= placement.bound, loads
    # A job not split is whole on its owner's shard.
    by_job: dict[str, set[str]] = {}
    for r in rows:
        if "job_id" in r:
            by_job.setdefault(r["job_id"], set()).add(r[H])
    for job, members in by_job.items():
        shards = {placement.nodes[n] for n in members}
        assert (len(shards) > 1) == (job in placement.split_jobs)
        assert placement.jobs[job] in shards
    return loads


@pytest.mark.parametrize("nodes", [512, 12_500])
@pytest.mark.parametrize("count", [2, 4, 8, 25])
def test_a_fleet_wide_job_does_not_pull_the_fleet_onto_one_shard(nodes: int, count: int) -> None:
    rows = _jobs_fleet(nodes)
    loads = _check_partition(rows, count)
    p = place(rows, count)
    assert p.split_jobs == {"nccl-test"}  # the small jobs stay whole
    assert min(loads) >= nodes // count // 2, loads  # and nobody is left empty


@pytest.mark.parametrize("nodes", [512, 12_500])
@pytest.mark.parametrize("count", [2, 4, 8, 25])
def test_chained_small_jobs_are_cut_within_the_bound(nodes: int, count: int) -> None:
    rows = _jobs_fleet(nodes, chain=True, fleet_wide=False)
    loads = _check_partition(rows, count)
    p = place(rows, count)
    # The chain is cut about once per shard; every other job is whole.
    assert len(p.split_jobs) <= 2 * count + 2, len(p.split_jobs)
    assert min(loads) >= nodes // count // 2, loads


def test_the_share_is_fast_at_100k_gpus() -> None:
    # 12,500 nodes of 8 GPUs, 100k ranks in 4-node jobs and a fleet-wide job: the rows are (node,
    # job, model), ~37k of them; placing them is what every shard does every cycle.
    rows = _jobs_fleet(12_500)
    began = time.process_time()
    place(rows, 25)
    assert time.process_time() - began < 2.0


def test_the_issue_case_two_jobs_and_one_rank_per_node_is_split_evenly() -> None:
    # Issue 35: two 4-node jobs on 8 nodes gave each shard of 2 one job / 4 nodes; one more job with
    # a rank on every node made it 0 of 8 and 8 of 8.
    rows = [{H: f"n{i}"} for i in range(8)]
    rows += [{H: f"n{i}", "job_id": "alpha"} for i in range(4)]
    rows += [{H: f"n{i}", "job_id": "beta"} for i in range(4, 8)]
    rows += [{H: f"n{i}", "job_id": "health-check"} for i in range(8)]
    shares = [share_of(rows, Shard(k, 2)) for k in range(2)]
    assert sorted(len(s.nodes) for s in shares) == [4, 4]
    for job, members in (("alpha", {"n0", "n1", "n2", "n3"}), ("beta", {"n4", "n5", "n6", "n7"})):
        (mine,) = [s for s in shares if job in s.jobs]
        assert members <= set(mine.nodes)
    assert sum("health-check" in s.jobs for s in shares) == 1
    assert all(s.summary()["bound"] == 5 for s in shares)


def _finding(kind: str, node: str | None, job: str | None = None, model: str | None = None) -> Finding:
    return Finding(
        kind=kind, severity="warning", node=node, start=0.0, cause="c", action="a", job_id=job,
        evidence={"model": model} if model else {},
    )  # fmt: skip


def test_each_verdict_is_reported_by_exactly_one_shard() -> None:
    """Every shard analyzes its nodes; a split job's verdicts can come out of several shards'
    analyses: each is kept by exactly one (node verdicts by the node's owner, job-level ones by the
    job's owner), and a whole job's by its owner even where they name a node of another shard."""
    rows = _jobs_fleet(64)
    count = 4
    shares = [share_of(rows, Shard(k, count)) for k in range(count)]
    p = place(rows, count)
    whole = sorted(j for j in p.jobs if j not in p.split_jobs)
    elsewhere = next(n for n, o in p.nodes.items() if o != p.jobs[whole[0]])
    findings = [
        _finding("failing_node", "node-00003"),
        _finding("straggler", "node-00010", "nccl-test"),  # a split job's rank
        _finding("mfu_drop", None, "nccl-test"),  # a split job's job-level verdict
        _finding("straggler", "node-00005", whole[1]),
        _finding("failing_node", elsewhere, whole[0]),  # a whole job's verdict naming another node
        _finding("capacity", None, model="llama"),
        _finding("slow_replica", "node-00000"),
        _finding("failing_node", "not-discovered"),  # what the placement does not know: kept
    ]
    kept = [[f for f in findings if s.reports_finding(f)] for s in shares]
    for f in findings[:-1]:
        assert sum(f in k for k in kept) == 1, f
    assert all(findings[-1] in k for k in kept)
    assert [s.shard.index for s, k in zip(shares, kept, strict=True) if findings[4] in k] == [
        p.jobs[whole[0]]
    ]
    assert [s.shard.index for s, k in zip(shares, kept, strict=True) if findings[2] in k] == [
        p.jobs["nccl-test"]
    ]
    # The report is cut the same way: node verdicts by node owner, job summaries by job owner.
    for s in shares:
        report = Report(start=0, end=1, findings=list(findings))
        report.nodes = {n: NodeVerdict(n) for n in p.nodes}
        report.jobs = {j: JobSummary(j) for j in p.jobs}
        s.report(report)
        assert set(report.nodes) == set(s.nodes)
        assert set(report.jobs) == set(s.jobs)
        assert s.job_states({j: {} for j in p.jobs}).keys() == set(s.jobs)
        assert [m["model"] for m in s.served_models([{"model": "llama"}])] == list(s.models)


def test_identity_series_find_what_all_the_analyzers_series_find() -> None:
    """Discovery reads a few identity series: on every simulator family (GPU training with NCCL RAS,
    hardware only, inference, Trainium), they find the same (node, job, model) rows as every series
    the analyzers load."""
    from fleetscope.analyzers.core import LOADED
    from fleetscope.simulate.record import simulate
    from fleetscope.simulate.spec import JobSpec, ScenarioSpec

    specs = [
        ScenarioSpec(name="realistic_ids", nodes=3, gpus_per_node=2, duration_s=300, seed=1, nccl_ras=True,
                     jobs=[JobSpec("a", nodes=2, first_node=0, tensor_parallel=2)]),
        *(ScenarioSpec.load(FIXTURES / f) for f in (
            "healthy_6n_s6_hwonly.json", "inference_healthy_4n_s201.json", "neuron_healthy_4n_s301.json")),
    ]  # fmt: skip
    labels = (H, "job_id", "model_name")
    for spec in specs:
        spec = dataclasses.replace(spec, duration_s=min(spec.duration_s, 300))
        rec = simulate(spec)

        def rows(names: tuple[str, ...]) -> set[tuple[str, ...]]:
            out = set()
            for name in set(names) & set(rec.metric_names()):  # noqa: B023
                keys = rec.labels[name]  # noqa: B023
                for key in rec.series_of(name):  # noqa: B023
                    row = dict(zip(keys, key, strict=True))
                    out.add(tuple(row.get(k, "") for k in labels))
            return out

        found = rows(IDENTITY_METRICS)
        if spec.nccl_ras:  # the RAS collector's series are among them (one per job, on rank 0's node)
            assert c.NCCL_RAS_UP in rec.metric_names()
        assert found == rows(LOADED), spec.name
        assert {r[0] for r in found} == {r[0] for r in rows(LOADED)} and len(
            {r[0] for r in found}
        ) == spec.nodes


def test_a_model_seen_on_no_node_is_shard_0s_where_its_series_go() -> None:
    rows = [{H: f"n{i}"} for i in range(6)] + [{"model_name": "tgi-only"}]
    for k in range(3):
        share = share_of(rows, Shard(k, 3))
        assert (share.models == ("tgi-only",)) == (k == 0)
        assert share.served_models([{"model": "tgi-only"}]) == ([{"model": "tgi-only"}] if k == 0 else [])


def test_every_shard_computes_the_same_placement_whatever_the_row_order() -> None:
    import random

    rows = _jobs_fleet(512, chain=True)
    first = place(rows, 8)
    for seed in range(3):
        shuffled = list(rows)
        random.Random(seed).shuffle(shuffled)
        again = place(shuffled, 8)
        assert (again.nodes, again.jobs, again.models, again.split_jobs) == (
            first.nodes,
            first.jobs,
            first.models,
            first.split_jobs,
        )
