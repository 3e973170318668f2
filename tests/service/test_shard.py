"""One replica's share of the fleet (fleetscope/service/shard.py): parsing ``--shard``, the stable
partition of jobs, models and nodes, and the label matcher its queries carry."""

from __future__ import annotations

import re

import pytest

from fleetscope.errors import FleetscopeError
from fleetscope.service.shard import Shard, discovery_query, owner, parse_shard, share_of
from fleetscope.service.views import shard_status

H = "Hostname"


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
    # A single job: its owner is the hash of its id.
    alone = share_of(
        [{H: "x1", "job_id": "solo"}, {H: "x2", "job_id": "solo"}], Shard(owner("job:solo", 3), 3)
    )
    assert alone.jobs == ("solo",) and alone.nodes == ("x1", "x2")


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
