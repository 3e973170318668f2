"""The synthetic Prometheus on its own (fast): the PromQL subset's parser and its errors, Prometheus'
number formatting, and the evaluation over a fleet of tile copies (renaming, Prometheus 2.x window
rules, aggregation across copies, a shard's literal matcher looked up name by name). Its answers
against a real Prometheus: test_synthetic_prom_real.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fleetscope.analyzers.core import LOADED
from fleetscope.service.shard import Shard, Share, discovery_query
from fleetscope.simulate.spec import node_name
from fleetscope.window.prometheus import PUSHDOWN, metric_query
from tests.support import synthetic_prom as sp
from tests.support.promql_subset import Aggregate, LastOverTime, PromQLError, Selector, parse, selector_of
from tests.support.synthetic_prom import Evaluator, Fleet, SyntheticPrometheus, Tile, TileSeries

T0 = 1_700_000_000_000  # ms


# ---------------------------------------------------------------------- the parser
def test_the_services_queries_parse() -> None:
    for name in LOADED:
        expr = parse(metric_query(name, 29.999, matcher='Hostname=~"a\\\\-1|b\\\\.2|"'))
        sel = selector_of(expr)
        assert isinstance(sel, Selector)
        assert sel.matchers[0].label == "__name__" and sel.matchers[0].value == name
        host = next(m for m in sel.matchers if m.label == "Hostname")
        assert host.literals == frozenset({"a-1", "b.2", ""})
        inner = expr.inner if isinstance(expr, Aggregate) else expr
        assert isinstance(inner, LastOverTime) and inner.range_ms == 29_999
        assert isinstance(expr, Aggregate) == (PUSHDOWN.get(name, ("", None))[1] is not None)
    identity = parse(discovery_query())
    assert isinstance(identity, Aggregate) and selector_of(identity).matchers[0].literals
    disc = parse(discovery_query(LOADED))
    assert isinstance(disc, Aggregate) and disc.op == "group"
    assert disc.by == ("Hostname", "job_id", "model_name")
    names = selector_of(disc).matchers[0]
    assert names.op == "=~" and names.literals is not None and set(LOADED) <= names.literals


def test_a_shares_matcher_is_a_literal_set() -> None:
    share = Share(Shard(0, 2), (), (), ("ip-10-1-0-10", "node.a+b"), 0, 0, 2)
    matcher = share.matcher()
    assert matcher is not None
    sel = selector_of(parse(f'{{__name__="x",{matcher}}}'))
    assert sel.matchers[1].literals == frozenset({"ip-10-1-0-10", "node.a+b", ""})


def test_real_regexes_are_anchored_and_negations_work() -> None:
    sel = selector_of(parse('x{a=~"ip-1[0-2]",b!~"z.*",c!="q"}'))
    a, b, c = sel.matchers[1:]
    assert a.literals is None and a.matches("ip-11") and not a.matches("ip-110") and not a.matches("xip-11")
    assert b.matches("y") and not b.matches("zz")
    assert c.matches("") and not c.matches("q")


@pytest.mark.parametrize(
    "query",
    [
        "rate(x[5m])",
        "sum without (a) (x)",
        "x offset 5m",
        "x + 1",
        'x{a="b"',
        '{a=""}',
        "last_over_time(x[5q])",
        'x{a="\\q"}',
        'x{a=~"("}',
        "max by (a) (max by (b) (x))",
        "",
    ],
)
def test_outside_the_subset_is_a_400_bad_data(query: str) -> None:
    server = SyntheticPrometheus(_fleet(3))
    try:
        status, body = server.handle(
            "/api/v1/query_range", {"query": [query], "start": ["1"], "end": ["2"], "step": ["1"]}
        )
    finally:
        server.httpd.server_close()
    assert status == 400
    doc = json.loads(body)
    assert doc["status"] == "error" and doc["errorType"] == "bad_data" and doc["error"]


def test_parse_errors_name_the_problem() -> None:
    with pytest.raises(PromQLError, match="unsupported function 'rate'"):
        parse("rate(x[5m])")
    with pytest.raises(PromQLError, match="at least one non-empty matcher"):
        parse('{a=""}')


# ---------------------------------------------------------------------- Prometheus' formatting
@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1.0, "1"),
        (0.5, "0.5"),
        (-2.25, "-2.25"),
        (1e-7, "1e-07"),
        (1e-6, "0.000001"),
        (1e16, "10000000000000000"),
        (989500000000000.0, "989500000000000"),
        (1e21, "1e+21"),
        (0.1 + 0.2, "0.30000000000000004"),
        (float("nan"), "NaN"),
        (float("inf"), "+Inf"),
        (float("-inf"), "-Inf"),
    ],
)
def test_values_are_written_like_go(value: float, text: str) -> None:
    assert sp.format_value(value) == text


def test_times_are_seconds_with_milliseconds() -> None:
    assert sp.format_time(1_500) == "1.500"
    assert sp.format_time(1_000) == "1"
    assert sp.format_time(1_007) == "1.007"
    assert sp.format_time(-1_500) == "-1.500"


# ---------------------------------------------------------------------- evaluation
def _fleet(nodes: int) -> Fleet:
    """A 2-node tile: each node one GPU series (``g``: node 0 every 15 s, node 1 missing the
    sample at 30 s) and one training series with ``job_id`` ``j`` (node 0 only)."""
    times = T0 + np.arange(5, dtype=np.int64) * 15_000
    gpu = np.array([[1.0, 2, 3, 4, 5], [10, 20, np.nan, 40, 50]])
    series = [
        TileSeries("g", (("Hostname", node_name(0)), ("UUID", "GPU-aaaa-0000"), ("gpu", "0")), 0, 0),
        TileSeries("g", (("Hostname", node_name(1)), ("UUID", "GPU-aaaa-0001"), ("gpu", "0")), 1, 1),
        TileSeries(
            "t", (("Hostname", node_name(0)), ("instance", f"{node_name(0)}:9401"), ("job_id", "j")), 0, 0
        ),
    ]
    tile = Tile(2, times, series, {"g": gpu, "t": np.array([[0.5, 0.5, 0.5, 0.5, 0.5]])})
    return Fleet(tile, nodes)


def _run(fleet: Fleet, query: str, start: int = T0, end: int = T0 + 60_000, step: int = 15_000):
    return Evaluator(fleet).evaluate(parse(query), start, end, step)


def test_copies_are_renamed_and_sorted_like_prometheus() -> None:
    ans = _run(_fleet(5), 'last_over_time({__name__="t"}[29999ms])')
    labels = [dict(row[0]) for row in ans.series]
    assert [x["Hostname"] for x in labels] == sorted(node_name(i) for i in (0, 2, 4))
    assert {x["job_id"] for x in labels} == {"j", "j-1", "j-2"}
    assert {x["instance"] for x in labels} == {f"{node_name(i)}:9401" for i in (0, 2, 4)}
    assert all(x["__name__"] == "t" for x in labels)  # last_over_time keeps it (Prometheus 2.x)
    for pairs, text, _, _ in ans.series:
        assert json.loads(text) == dict(pairs)
    uuids = {dict(r[0])["UUID"] for r in _run(_fleet(5), "g").series}
    assert len(uuids) == 5  # every GPU its own UUID


def test_last_over_time_reads_the_closed_window() -> None:
    # Node 1 has no sample at T0+30s: a 15 s window still finds the one at T0+15s (closed
    # interval, Prometheus 2.x), a 14.999 s one does not.
    fleet = _fleet(2)
    t = [(T0 + i * 15_000) / 1000 for i in range(5)]
    for window, want in (
        ("15s", [[t[0], "10"], [t[1], "20"], [t[2], "20"], [t[3], "40"], [t[4], "50"]]),
        ("14999ms", [[t[0], "10"], [t[1], "20"], [t[3], "40"], [t[4], "50"]]),
    ):
        ans = _run(fleet, f'last_over_time(g{{Hostname="{node_name(1)}"}}[{window}])')
        assert json.loads(f"[{ans.series[0][2]}]") == want
        assert ans.series[0][3] == len(want)


def test_aggregations_merge_copies_only_when_the_labels_do() -> None:
    fleet = _fleet(5)
    per_node = _run(fleet, "max by (Hostname) (g)")
    assert len(per_node.series) == 5
    whole = _run(fleet, "max by (gpu) (g)")
    assert [dict(r[0]) for r in whole.series] == [{"gpu": "0"}]
    assert json.loads(f"[{whole.series[0][2]}]")[0] == [T0 / 1000, "10"]
    count = _run(fleet, "count by (gpu) (g)")
    assert json.loads(f"[{count.series[0][2]}]")[0][1] == "5"
    found = _run(fleet, 'group by (Hostname, job_id) (last_over_time({__name__=~"g|t"}[60s]))')
    rows = {tuple(sorted(dict(r[0]).items())) for r in found.series}
    assert (("Hostname", node_name(2)), ("job_id", "j-1")) in rows
    assert (("Hostname", node_name(3)),) in rows


def test_a_literal_host_matcher_costs_its_names_not_the_fleet(monkeypatch) -> None:
    calls = []

    def counted(i: int) -> str:
        calls.append(i)
        return node_name(i)

    monkeypatch.setattr(sp, "node_name", counted)
    fleet = _fleet(10**9)  # a billion nodes: any pass over the fleet would never end
    names = [node_name(i) for i in (7, 123_457, 999_999)]
    matcher = "|".join(n.replace("-", "\\\\-") for n in names)
    ans = _run(fleet, f'g{{Hostname=~"{matcher}"}}')
    assert sorted(dict(r[0])["Hostname"] for r in ans.series) == sorted(names)
    assert len(calls) < 50


def test_series_endpoint_and_store_counts() -> None:
    with SyntheticPrometheus(_fleet(4)) as server:
        status, body = server.handle("/api/v1/series", {"match[]": ["t", 'g{gpu="0"}']})
        assert status == 200
        data = json.loads(body)["data"]
        assert len(data) == 2 + 4 and all("__name__" in x for x in data)
        server.stats.snapshot(reset=True)
        status, body = server.handle(
            "/api/v1/query_range",
            {"query": ["g"], "start": [str(T0 / 1000)], "end": [str(T0 / 1000 + 60)], "step": ["15"]},
        )
        doc = json.loads(body)
        assert status == 200 and doc["data"]["resultType"] == "matrix"
        stats = server.stats.snapshot()
        answered = sum(len(r["values"]) for r in doc["data"]["result"])
        assert stats["queries"] == {"query_range": 1}
        assert stats["samples_answered"] == answered == 4 * 5 - 0  # the bare selector bridges the gap
        assert stats["by_kind"]["selector"]["queries"] == 1
        assert stats["samples_scanned"] == 2 * 5 + 2 * 4  # node 0's copies 5 samples, node 1's 4


def test_a_simulated_tile_serves_the_service_queries() -> None:
    from fleetscope.simulate.spec import JobSpec, ScenarioSpec

    spec = ScenarioSpec(
        name="realistic_tiny",
        nodes=2,
        gpus_per_node=2,
        efa_per_node=1,
        duration_s=120,
        jobs=[JobSpec("a", nodes=1)],
    )
    fleet = Fleet(Tile.simulate(spec), 6)
    start = round(spec.start * 1000) + 60_000
    ans = Evaluator(fleet).evaluate(parse(discovery_query(LOADED)), start, start + 60_000, 60_000)
    hosts = {dict(r[0])["Hostname"] for r in ans.series}
    jobs = {dict(r[0]).get("job_id") for r in ans.series} - {None}
    assert hosts == {node_name(i) for i in range(6)}
    assert jobs == {"a", "a-1", "a-2"}


def test_the_store_can_charge_for_samples_it_folds_away() -> None:
    import time

    server = SyntheticPrometheus(_fleet(4), scan_ns=2e6, scan_series_ns=5e6)  # 2 ms a sample, 5 a series
    try:
        t0 = time.thread_time()
        params = {"query": ["group by (gpu) (g)"], "start": [str(T0 / 1000)], "end": [str(T0 / 1000 + 60)]}
        status, _ = server.handle("/api/v1/query_range", {**params, "step": ["60"]})
        spent = time.thread_time() - t0
        stats = server.stats.snapshot()
    finally:
        server.httpd.server_close()
    assert status == 200
    folded = stats["samples_scanned"] - stats["samples_answered"]
    assert folded == 18 - 2  # 18 samples read (4 nodes' copies), 2 points answered
    assert stats["series_scanned"] == 4
    assert spent >= folded * 2e-3 + (4 - 1) * 5e-3
