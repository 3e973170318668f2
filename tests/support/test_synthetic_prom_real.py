"""The synthetic Prometheus answers the service's queries as a real Prometheus does.

A small fleet (8 nodes made of three copies of a 3-node tile, the last copy partial) is served
synthetically and, sample for sample, backfilled into a real Prometheus. Every query a sharded
service cycle asks (the discovery query, on the identity series and on every loaded metric as
before; every metric's range query, without and with a shard's node matcher; a bare selector; an
instant query; ``/api/v1/series``) gets the same series, labels and values (strings included) from
both."""

from __future__ import annotations

import json

import pytest

from fleetscope.analyzers.core import LOADED
from fleetscope.service.shard import (
    DISCOVERY_STEP_S,
    RECORDED_IDENTITY,
    Shard,
    discovery_query,
    recorded_discovery_query,
    share_of,
)
from fleetscope.simulate.exposition import iter_openmetrics, write_openmetrics_file
from fleetscope.simulate.spec import FaultSpec, JobSpec, ScenarioSpec
from fleetscope.window.aliases import with_aliases
from fleetscope.window.frames import lookback_seconds
from fleetscope.window.prometheus import metric_query
from tests.support.prom import Prometheus, backfill_openmetrics, backfill_rules, discovery_rule_file, http_get
from tests.support.synthetic_prom import Fleet, SyntheticPrometheus, Tile, with_discovery_rule

pytestmark = [pytest.mark.server]

STEP = 15.0
TILE = ScenarioSpec(
    name="realistic_synthetic_check",
    nodes=3,
    gpus_per_node=2,
    efa_per_node=1,
    duration_s=480,
    seed=3,
    jobs=[JobSpec("alpha", nodes=2, first_node=0, tensor_parallel=2)],
    faults=[FaultSpec(kind="thermal_throttle", at_s=120, node=1, gpu=0, slowdown=0.3)],
)
FLEET_NODES = 8


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("synthetic")
    tile = Tile.simulate(TILE)
    fleet = Fleet(with_discovery_rule(tile), FLEET_NODES)
    # The real one gets the raw series, and its discovery rule's series from promtool's rule
    # backfill over them; the synthetic one computes its own.
    raw = ((name, series) for name, series in fleet.families() if name != RECORDED_IDENTITY)
    write_openmetrics_file(iter_openmetrics(raw), tmp / "fleet.om")
    backfill_openmetrics(tmp / "fleet.om", tmp / "data")
    with Prometheus(tmp / "raw", data_dir=tmp / "data") as raw_only:
        first, last = tile.times[0] / 1000, tile.times[-1] / 1000
        backfill_rules(raw_only.url, discovery_rule_file(tmp), first, last, tmp / "data", "15s")
    with Prometheus(tmp / "p", data_dir=tmp / "data") as real, SyntheticPrometheus(fleet) as synthetic:
        yield real, synthetic


def _get(url: str, path: str, **params: object) -> tuple[int, dict]:
    from urllib.parse import urlencode

    status, body = http_get(f"{url}/api/v1/{path}?{urlencode(params, doseq=True)}", timeout=60)
    return status, json.loads(body)


def _same(both, path: str, **params: object) -> list:
    real, synthetic = both
    a = _get(real.url, path, **params)
    b = _get(synthetic.url, path, **params)
    assert a[0] == 200 and b[0] == 200, (a, b)
    ra, rb = a[1]["data"], b[1]["data"]
    if isinstance(ra, dict):
        assert ra["resultType"] == rb["resultType"]
        ra, rb = ra["result"], rb["result"]
    if path == "query":  # an instant vector's order is not defined
        ra, rb = sorted(ra, key=json.dumps), sorted(rb, key=json.dumps)
    assert [r.get("metric", r) for r in ra] == [r.get("metric", r) for r in rb], params
    assert ra == rb, params
    return ra


def _window() -> tuple[float, float]:
    return TILE.start + 120, TILE.start + TILE.duration_s - 30


def _shard_matchers(both) -> list[str]:
    start, end = _window()
    rows = _same(both, "query_range", query=discovery_query(), start=start, end=end, step=DISCOVERY_STEP_S)
    labels = [r["metric"] for r in rows]
    matchers = [share_of(labels, Shard(k, 3)).matcher() for k in range(3)]
    return [m for m in matchers if m]


@pytest.mark.parametrize("metrics", [None, LOADED], ids=["identity-series", "every-loaded-metric"])
def test_discovery_finds_every_node_and_job(both, metrics) -> None:
    start, end = _window()
    query = discovery_query() if metrics is None else discovery_query(metrics)
    rows = _same(both, "query_range", query=query, start=start, end=end, step=DISCOVERY_STEP_S)
    hosts = {r["metric"].get("Hostname") for r in rows}
    jobs = {r["metric"].get("job_id") for r in rows} - {None}
    assert len(hosts) == FLEET_NODES
    assert jobs == {"alpha", "alpha-1", "alpha-2"}


def test_the_recorded_discovery_matches_promtools_rule_backfill(both) -> None:
    """The synthetic store's discovery rule series, read as the service reads them, are what
    Prometheus' rule evaluation (promtool's backfill of the generated rule) gives, and the rows
    are the identity series'."""
    start, end = _window()
    rows = _same(
        both, "query_range", query=recorded_discovery_query(), start=start, end=end, step=DISCOVERY_STEP_S
    )
    raw = _same(both, "query_range", query=discovery_query(), start=start, end=end, step=DISCOVERY_STEP_S)
    assert rows == raw and len(rows) == FLEET_NODES + 6  # every node, and the 6 in a job


def test_every_metric_query_matches_with_and_without_a_shard_matcher(both) -> None:
    start, end = _window()
    matchers = _shard_matchers(both)
    assert len(matchers) >= 2  # the shards split the fleet
    answered = 0
    for name in with_aliases(LOADED) or ():
        for matcher in ["", *matchers]:
            q = metric_query(name, lookback_seconds(STEP), matcher=matcher)
            answered += len(_same(both, "query_range", query=q, start=start, end=end, step=STEP))
    assert answered > 500  # the fleet's series were compared, not empty answers


def test_bare_selectors_instant_queries_and_series(both) -> None:
    start, end = _window()
    sel = '{__name__="DCGM_FI_DEV_GPU_TEMP",Hostname!~"ip-10-1-0-1[0-2]",gpu="1"}'
    assert _same(both, "query_range", query=sel, start=start, end=end, step=60)
    assert _same(both, "query", query=f"max by (Hostname) ({sel})", time=end)
    assert _same(both, "series", **{"match[]": sel, "start": start, "end": end})


def test_bad_queries_are_refused_like_prometheus(both) -> None:
    real, synthetic = both
    for q in ("rate(", "up{", ""):
        a, b = _get(real.url, "query", query=q), _get(synthetic.url, "query", query=q)
        assert a[0] == b[0] == 400, (q, a, b)
        assert a[1]["errorType"] == b[1]["errorType"] == "bad_data"
